package eventrecorder

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The JetStream layout of DESIGN.md "Events": one stream EVENTS holding the subjects
// skiff.events.<namespace>.
const (
	// StreamName is the JetStream stream events are published to.
	StreamName = "EVENTS"
	// SubjectPrefix starts every event subject; the namespace follows.
	SubjectPrefix = "skiff.events."
	// StreamMaxAge is how long JetStream keeps an event nobody consumed: as long as the
	// apiserver keeps a persisted one (its lease TTL).
	StreamMaxAge = time.Hour
)

// Subject is the subject events of namespace are published on.
func Subject(namespace string) string { return SubjectPrefix + namespace }

// EnsureStream creates the EVENTS stream (file storage, subjects skiff.events.>,
// messages kept up to StreamMaxAge, a 2 minute de-duplication window on the message id)
// or updates it to that configuration. Publishers and the apiserver's consumer both
// call it, so either may start first.
func EnsureStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "core/v1 Events from skiff's components, consumed by the apiserver",
		Subjects:    []string{SubjectPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      StreamMaxAge,
		Discard:     jetstream.DiscardOld,
		Duplicates:  2 * time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", StreamName, err)
	}
	return s, nil
}
