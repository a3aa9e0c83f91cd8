package runtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestUntil(t *testing.T) {
	var polls atomic.Int32
	var ended atomic.Bool
	Until(t, func(ctx context.Context) error {
		<-ctx.Done()
		ended.Store(true)
		return nil
	}, func(context.Context) error {
		if polls.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if !ended.Load() || polls.Load() != 3 {
		t.Errorf("run ended %v after %d polls; want true after 3", ended.Load(), polls.Load())
	}
}
