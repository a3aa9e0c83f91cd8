package criolog_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"skiff.dev/services/cri/criolog"
)

type entry struct {
	stream  criolog.Stream
	tag     criolog.Tag
	content string
}

func readEntries(t *testing.T, path string) []entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []entry
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4*criolog.MaxLineSize)
	for sc.Scan() {
		e, err := criolog.ParseLine(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if e.Time.IsZero() {
			t.Errorf("entry %q has no timestamp", sc.Text())
		}
		got = append(got, entry{e.Stream, e.Tag, string(e.Content)})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestCopySplitsOutputIntoEntries(t *testing.T) {
	long := strings.Repeat("x", criolog.MaxLineSize)
	for _, tc := range []struct {
		name   string
		stream criolog.Stream
		input  string
		want   []entry
	}{
		{"lines become full entries", criolog.Stdout, "hello\nworld\n",
			[]entry{{criolog.Stdout, criolog.Full, "hello"}, {criolog.Stdout, criolog.Full, "world"}}},
		{"empty line is kept", criolog.Stdout, "\n",
			[]entry{{criolog.Stdout, criolog.Full, ""}}},
		{"stderr is tagged stderr", criolog.Stderr, "oops\n",
			[]entry{{criolog.Stderr, criolog.Full, "oops"}}},
		{"unterminated output is partial", criolog.Stdout, "done\nno newline",
			[]entry{{criolog.Stdout, criolog.Full, "done"}, {criolog.Stdout, criolog.Partial, "no newline"}}},
		{"long line is split", criolog.Stdout, long + "tail\n",
			[]entry{{criolog.Stdout, criolog.Partial, long}, {criolog.Stdout, criolog.Full, "tail"}}},
		{"no output, no entries", criolog.Stdout, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "0.log")
			f, err := criolog.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := criolog.Copy(f, tc.stream, strings.NewReader(tc.input)); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			got := readEntries(t, path)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d entries, want %d: %v", len(got), len(tc.want), got)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("entry %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestReopenWritesToAFreshFileAfterRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	f, err := criolog.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.WriteString(criolog.Stdout, "before\n"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := f.Reopen(); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteString(criolog.Stdout, "after"); err != nil {
		t.Fatal(err)
	}
	if got := readEntries(t, path+".1"); len(got) != 1 || got[0].content != "before" {
		t.Errorf("rotated file = %v, want only \"before\"", got)
	}
	if got := readEntries(t, path); len(got) != 1 || got[0].content != "after" {
		t.Errorf("new file = %v, want only \"after\"", got)
	}
}

func TestNilFileDiscards(t *testing.T) {
	var f *criolog.File
	if err := criolog.Copy(f, criolog.Stdout, strings.NewReader("x\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestParseLine(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, tc := range []struct {
		name    string
		line    string
		want    entry
		wantErr bool
	}{
		{"full", ts.Format(time.RFC3339Nano) + " stdout F hello world\n", entry{criolog.Stdout, criolog.Full, "hello world"}, false},
		{"partial with flags", ts.Format(time.RFC3339Nano) + " stderr P:x abc", entry{criolog.Stderr, criolog.Partial, "abc"}, false},
		{"empty content", ts.Format(time.RFC3339Nano) + " stdout F", entry{criolog.Stdout, criolog.Full, ""}, false},
		{"bad timestamp", "yesterday stdout F x", entry{}, true},
		{"bad stream", ts.Format(time.RFC3339Nano) + " stdin F x", entry{}, true},
		{"too short", ts.Format(time.RFC3339Nano), entry{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := criolog.ParseLine([]byte(tc.line))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseLine(%q) succeeded, want error", tc.line)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := (entry{e.Stream, e.Tag, string(e.Content)}); got != tc.want || !e.Time.Equal(ts) {
				t.Errorf("ParseLine(%q) = %+v at %v, want %+v at %v", tc.line, got, e.Time, tc.want, ts)
			}
		})
	}
}
