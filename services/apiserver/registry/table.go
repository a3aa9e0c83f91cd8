package registry

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// defaultTableColumns are kube-apiserver's columns for kinds without a printer
// (k8s.io/apiserver/pkg/registry/rest/table.go).
var defaultTableColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace."},
	{Name: "Created At", Type: "date", Description: "CreationTimestamp is a timestamp representing the server time when this object was created."},
}

// ConvertToTable renders obj (one object or a list) as a meta.k8s.io/v1 Table with every
// column, wide ones included (kubectl hides priority-1 columns unless -o wide). Each row
// carries the object as opts.IncludeObject asks: PartialObjectMetadata by default, the
// whole object for "Object", nothing for "None". Mirrors
// k8s.io/kubernetes/pkg/printers/storage.TableConvertor.
func (e *Store) ConvertToTable(ctx context.Context, obj runtime.Object, opts *metav1.TableOptions) (*metav1.Table, error) {
	table := &metav1.Table{}
	printer, hasPrinter := e.Strategy.(TablePrinter)
	if hasPrinter {
		table.ColumnDefinitions = printer.TableColumns()
	} else {
		table.ColumnDefinitions = defaultTableColumns
	}
	if opts != nil && opts.NoHeaders {
		table.ColumnDefinitions = nil
	}
	include := metav1.IncludeMetadata
	if opts != nil && opts.IncludeObject != "" {
		include = opts.IncludeObject
	}
	addRow := func(item runtime.Object) error {
		m, err := meta.Accessor(item)
		if err != nil {
			return err
		}
		row := metav1.TableRow{}
		if hasPrinter {
			row.Cells = printer.TableRow(item)
		} else {
			row.Cells = []interface{}{m.GetName(), m.GetCreationTimestamp().UTC().Format(time.RFC3339)}
		}
		switch include {
		case metav1.IncludeObject:
			row.Object.Object = item
		case metav1.IncludeMetadata:
			pom := meta.AsPartialObjectMetadata(m)
			pom.TypeMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}
			row.Object.Object = pom
		case metav1.IncludeNone:
		default:
			return apierrors.NewBadRequest(fmt.Sprintf("unrecognized includeObject value: %q", include))
		}
		table.Rows = append(table.Rows, row)
		return nil
	}
	if meta.IsListType(obj) {
		table.Rows = []metav1.TableRow{}
		items, err := meta.ExtractList(obj)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		for _, item := range items {
			if err := addRow(item); err != nil {
				return nil, err
			}
		}
		if l, err := meta.ListAccessor(obj); err == nil {
			table.ResourceVersion = l.GetResourceVersion()
			table.Continue = l.GetContinue()
			table.RemainingItemCount = l.GetRemainingItemCount()
		}
	} else {
		if err := addRow(obj); err != nil {
			return nil, err
		}
		if m, err := meta.Accessor(obj); err == nil {
			table.ResourceVersion = m.GetResourceVersion()
		}
	}
	table.Kind = "Table"
	table.APIVersion = "meta.k8s.io/v1"
	return table, nil
}

// TranslateTimestampSince renders the age of t as kubectl does ("5m", "3d"), or
// "<unknown>" for a zero time. Mirrors printers' translateTimestampSince.
func TranslateTimestampSince(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

// NameColumn is the NAME column every printer starts with.
var NameColumn = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name",
	Description: "Name must be unique within a namespace. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"}

// AgeColumn is the AGE column.
var AgeColumn = metav1.TableColumnDefinition{Name: "Age", Type: "string",
	Description: "CreationTimestamp is a timestamp representing the server time when this object was created."}
