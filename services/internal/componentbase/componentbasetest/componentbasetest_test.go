package componentbasetest

import (
	"context"
	"errors"
	"flag"
	"sync/atomic"
	"testing"
)

func TestRunUntil(t *testing.T) {
	var polls atomic.Int32
	var ended atomic.Bool
	RunUntil(t, func(ctx context.Context) error {
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

func TestCheckFlags(t *testing.T) {
	fs := CheckFlags(t, func(fs *flag.FlagSet) {
		fs.String("b", "", "")
		fs.Int("a", 7, "")
	}, []string{"a", "b"}, map[string]string{"a": "7"})
	if err := fs.Parse([]string{"-a=8"}); err != nil {
		t.Fatal(err)
	}
}
