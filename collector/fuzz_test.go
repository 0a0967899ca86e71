package collector_test

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
)

// FuzzScanRecording feeds the recording reader hostile and truncated
// files: it returns an error or the snapshots it read, never panics, and
// every snapshot it hands over has a time.
func FuzzScanRecording(f *testing.F) {
	header := `{"pooltop_recording":1,"started":"2026-01-02T03:04:05Z"}`
	snap := `{"time":"2026-01-02T03:04:06Z","pool":{"unused":10,"pending":1,"expired":0,"consumed":5},"lock_waiters":0,"poll_ms":1.5}`
	for _, s := range []string{
		header + "\n" + snap + "\n" + snap + "\n",
		header + "\n" + snap[:40],
		snap + "\n{\"time\":",
		"\n\n" + header + "\n",
		`{"pooltop_recording":99}` + "\n",
		`{"time":"not a time"}`,
		"{}\n" + snap,
		strings.Repeat("[", 1000),
		`{"time":"2026-01-02T03:04:06Z","pool":{"unused":1e400}}`,
		"\x00\xff\xfe" + snap,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		_ = collector.ScanRecording(bytes.NewReader(data), "fuzz", func(collector.RecordingHeader) {}, func(s collector.Snapshot, line []byte) error {
			if s.Time.IsZero() {
				t.Fatalf("a snapshot without a time was handed over: %q", line)
			}
			n++
			return nil
		})
		var rec collector.Recording
		_ = collector.ReadRecording(&rec, bytes.NewReader(data), "fuzz")
		if len(rec.Snapshots) != n {
			t.Fatalf("ReadRecording kept %d snapshots, ScanRecording handed over %d", len(rec.Snapshots), n)
		}
	})
}

// FuzzTableNames: whatever --table and --schema accept is a plain
// identifier that quotes as itself and reads back the same once written
// out, and nothing panics.
func FuzzTableNames(f *testing.F) {
	for _, s := range []string{"public.resource_pool", "resource_pool", "s.t", `"x".y`, "a.b.c", "pg_catalog.pg_class", "x;drop table y", "ü.t", "a$b.c", strings.Repeat("a", 70), ".", "a.", ".b", "A.B"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		schema, table, err := collector.ParseTable(s)
		if err == nil {
			for _, name := range []string{schema, table} {
				if name == "" || len(name) > 63 || !utf8.ValidString(name) || strings.ContainsAny(name, "\"'.; \x00") {
					t.Fatalf("ParseTable(%q) accepted %q", s, name)
				}
				q := pgx.Identifier{name}.Sanitize()
				if q != `"`+name+`"` {
					t.Fatalf("%q quotes as %s", name, q)
				}
			}
			if !strings.Contains(s, ".") && schema != "public" {
				t.Fatalf("ParseTable(%q) put a bare table in %q", s, schema)
			}
			// What was accepted reads back the same once written out.
			if s2, t2, err := collector.ParseTable(schema + "." + table); err != nil || s2 != schema || t2 != table {
				t.Fatalf("ParseTable(%q) = %q, %q; written back, read as %q, %q (%v)", s, schema, table, s2, t2, err)
			}
		}
		if engine.ValidSchema(s) == nil {
			if s == "" || len(s) > 63 || strings.ContainsAny(s, "\"'.; \x00") || strings.HasPrefix(strings.ToLower(s), "pg_") || strings.EqualFold(s, "information_schema") {
				t.Fatalf("ValidSchema accepted %q", s)
			}
			if q := (pgx.Identifier{s}).Sanitize(); q != `"`+s+`"` {
				t.Fatalf("schema %q quotes as %s", s, q)
			}
		}
	})
}
