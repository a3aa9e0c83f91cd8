// Package scheme holds the apiserver's runtime.Scheme: the k8s.io/api types skiff serves,
// meta.k8s.io/v1 (Table, PartialObjectMetadata) and the option types decoded from query
// parameters. It mirrors kube-apiserver's legacyscheme, minus internal versions: skiff
// stores and serves the versioned types directly.
package scheme

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// Scheme knows every type the apiserver encodes or decodes. It is filled once at init
// and only read afterwards.
var Scheme = runtime.NewScheme()

// Codecs builds serializers for JSON, YAML and protobuf over Scheme.
var Codecs = serializer.NewCodecFactory(Scheme)

// StrictCodecs decode request bodies reporting unknown and duplicate fields as a
// strict-decoding error next to the decoded object, for fieldValidation=Strict|Warn.
var StrictCodecs = serializer.NewCodecFactory(Scheme, serializer.EnableStrict)

// ParameterCodec decodes query parameters into option structs (ListOptions,
// CreateOptions, DeleteOptions, PatchOptions).
var ParameterCodec = runtime.NewParameterCodec(Scheme)

// StorageCodec encodes objects for etcd as protobuf (as kube-apiserver does by default)
// and decodes whatever it finds there (protobuf, or JSON written by hand).
var StorageCodec runtime.Codec

// ProtobufSerializer writes protobuf response bodies for clients that prefer them.
var ProtobufSerializer = protobuf.NewSerializer(Scheme, Scheme)

// JSONSerializer writes response bodies.
var JSONSerializer = json.NewSerializerWithOptions(json.DefaultMetaFactory, Scheme, Scheme, json.SerializerOptions{})

// ServedGroupVersions lists the API group versions skiff serves, preferred first.
var ServedGroupVersions = []schema.GroupVersion{
	corev1.SchemeGroupVersion,
	coordinationv1.SchemeGroupVersion,
	certificatesv1.SchemeGroupVersion,
	rbacv1.SchemeGroupVersion,
	discoveryv1.SchemeGroupVersion,
	appsv1.SchemeGroupVersion,
	batchv1.SchemeGroupVersion,
	eventsv1.SchemeGroupVersion,
	nodev1.SchemeGroupVersion,
	policyv1.SchemeGroupVersion,
	networkingv1.SchemeGroupVersion,
	admissionregistrationv1.SchemeGroupVersion,
	apiextensionsv1.SchemeGroupVersion,
	apiregistrationv1.SchemeGroupVersion,
	flowcontrolv1.SchemeGroupVersion,
	schedulingv1.SchemeGroupVersion,
	storagev1.SchemeGroupVersion,
	autoscalingv2.SchemeGroupVersion,
	autoscalingv1.SchemeGroupVersion,
}

func init() {
	utilruntime.Must(corev1.AddToScheme(Scheme))
	utilruntime.Must(coordinationv1.AddToScheme(Scheme))
	utilruntime.Must(certificatesv1.AddToScheme(Scheme))
	utilruntime.Must(discoveryv1.AddToScheme(Scheme))
	utilruntime.Must(authorizationv1.AddToScheme(Scheme))
	utilruntime.Must(authenticationv1.AddToScheme(Scheme))
	utilruntime.Must(rbacv1.AddToScheme(Scheme))
	utilruntime.Must(appsv1.AddToScheme(Scheme))
	utilruntime.Must(batchv1.AddToScheme(Scheme))
	utilruntime.Must(eventsv1.AddToScheme(Scheme))
	utilruntime.Must(nodev1.AddToScheme(Scheme))
	utilruntime.Must(policyv1.AddToScheme(Scheme))
	utilruntime.Must(networkingv1.AddToScheme(Scheme))
	utilruntime.Must(admissionregistrationv1.AddToScheme(Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(Scheme))
	utilruntime.Must(apiregistrationv1.AddToScheme(Scheme))
	utilruntime.Must(flowcontrolv1.AddToScheme(Scheme))
	utilruntime.Must(schedulingv1.AddToScheme(Scheme))
	utilruntime.Must(storagev1.AddToScheme(Scheme))
	// events.k8s.io/v1 Events are core/v1 Events seen in other words.
	utilruntime.Must(addEventConversions(Scheme))
	// autoscaling/v1 Scale is what deployments/scale and replicasets/scale read and write;
	// HorizontalPodAutoscalers are stored as autoscaling/v2 and served in v1 too.
	utilruntime.Must(autoscalingv1.AddToScheme(Scheme))
	utilruntime.Must(autoscalingv2.AddToScheme(Scheme))
	utilruntime.Must(addAutoscalingConversions(Scheme))
	// Status, WatchEvent and the option types live in the core group version too, as in
	// kube-apiserver; Table and PartialObjectMetadata in meta.k8s.io/v1.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(metav1.AddMetaToScheme(Scheme))
	// A group's versions in ServedGroupVersions' order, preferred first (autoscaling: v2,
	// then v1).
	var groups []string
	versions := map[string][]schema.GroupVersion{}
	for _, gv := range ServedGroupVersions {
		if _, seen := versions[gv.Group]; !seen {
			groups = append(groups, gv.Group)
		}
		versions[gv.Group] = append(versions[gv.Group], gv)
	}
	for _, g := range groups {
		utilruntime.Must(Scheme.SetVersionPriority(versions[g]...))
	}

	StorageCodec = storageCodec{Codecs.CodecForVersions(ProtobufSerializer, Codecs.UniversalDeserializer(),
		schema.GroupVersions(ServedGroupVersions), nil)}
}

// EncoderFor returns a JSON encoder that sets apiVersion and kind for objects of gv.
func EncoderFor(gv schema.GroupVersion) runtime.Encoder {
	return Codecs.EncoderForVersion(JSONSerializer, gv)
}
