package collector

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
)

// RecordingFormat is the version of the recording format this pooltop
// writes and the newest it reads. A recording is NDJSON: a header line
// (RecordingHeader) at the start of each run, then one snapshot per line,
// the very objects `watch --headless --json` prints. A file of plain
// `--json` output, with no header, is a recording too.
const RecordingFormat = 1

// RecordingHeader is the first line a recorder writes, and again after
// each rotation: what was recorded, by which pooltop, and from where (the
// dashboard's Info: host, database, user and table, never a password).
type RecordingHeader struct {
	Format    int       `json:"pooltop_recording"`
	Version   string    `json:"version"` // the pooltop build that recorded
	Started   time.Time `json:"started"`
	Mode      string    `json:"mode"` // "watch" or "demo"
	IntervalS float64   `json:"interval_s"`
	Source    Info      `json:"source"`
}

// Recorder appends snapshot lines to a file and keeps it bounded: when a
// line would take the file past Max bytes, the file is renamed to
// FILE.1 (replacing an older FILE.1) and a new FILE begins with the
// header, so the recording never takes more than about twice Max on disk.
// The file is created readable by its owner only: query texts of the
// sessions on the pool are in it.
type Recorder struct {
	path   string
	max    int64
	header []byte

	mu   sync.Mutex
	f    *os.File
	size int64
}

// NewRecorder opens (appending) or creates path and writes h to it.
func NewRecorder(path string, maxBytes int64, h RecordingHeader) (*Recorder, error) {
	h.Format = RecordingFormat
	line, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	r := &Recorder{path: path, max: maxBytes, header: append(line, '\n')}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Recorder) open() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("record: %w", err)
	}
	r.f, r.size = f, st.Size()
	if r.size > 0 && r.size+int64(len(r.header)) > r.max {
		return r.rotate()
	}
	return r.write(r.header)
}

func (r *Recorder) write(b []byte) error {
	n, err := r.f.Write(b)
	r.size += int64(n)
	if err != nil {
		return fmt.Errorf("record %s: %w", r.path, err)
	}
	return nil
}

// rotate moves the file to FILE.1 and starts a new one with the header.
func (r *Recorder) rotate() error {
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("record %s: %w", r.path, err)
	}
	if err := os.Rename(r.path, r.path+".1"); err != nil {
		return fmt.Errorf("record: rotate: %w", err)
	}
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	r.f, r.size = f, 0
	return r.write(r.header)
}

// Write appends one snapshot line (JSON and its newline).
func (r *Recorder) Write(line []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return errors.New("record: closed")
	}
	if r.size+int64(len(line)) > r.max && r.size > int64(len(r.header)) {
		if err := r.rotate(); err != nil {
			return err
		}
	}
	return r.write(line)
}

// Close closes the file.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// Recording is a recording read back: its first header, if it has one,
// and its snapshots.
type Recording struct {
	Header    *RecordingHeader
	Snapshots []Snapshot
}

// maxLine bounds a recording's line: a snapshot with many waiters and
// long queries is a few hundred kilobytes at most.
const maxLine = 16 << 20

// ReadRecording reads a recording from r, named name in errors, and
// appends it to rec, so that several files (FILE.1, then FILE) read as one.
func ReadRecording(rec *Recording, r io.Reader, name string) error {
	return ScanRecording(r, name, func(h RecordingHeader) {
		if rec.Header == nil {
			rec.Header = &h
		}
	}, func(s Snapshot, _ []byte) error {
		rec.Snapshots = append(rec.Snapshots, s)
		return nil
	})
}

// ScanRecording reads a recording from r, named name in errors, line by
// line: header gets each header line, snapshot each snapshot and its line
// as recorded (valid until it returns). A last line cut short (pooltop
// killed in the middle of a write) is dropped; any other line that is not
// a header or a snapshot is an error.
func ScanRecording(r io.Reader, name string, header func(RecordingHeader), snapshot func(Snapshot, []byte) error) error {
	return ScanRecordingWarn(r, name, header, snapshot, nil)
}

// ScanRecordingWarn is ScanRecording, calling dropped (when not nil) with
// the number of a last line it dropped because it was cut short.
func ScanRecordingWarn(r io.Reader, name string, header func(RecordingHeader), snapshot func(Snapshot, []byte) error, dropped func(line int)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var bad error
	badLine := 0
	seen := 0
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if bad != nil {
			return bad // a bad line that was not the last
		}
		if bytes.Contains(line[:min(len(line), 32)], []byte(`"pooltop_recording"`)) {
			var h RecordingHeader
			if err := json.Unmarshal(line, &h); err != nil {
				return fmt.Errorf("%s line %d: a recording header that does not parse: %w", name, n, err)
			}
			if h.Format > RecordingFormat || h.Format < 1 {
				return fmt.Errorf("%s: recording format %d; this pooltop reads format 1 to %d: replay it with a newer pooltop", name, h.Format, RecordingFormat)
			}
			header(h)
			continue
		}
		var s Snapshot
		if err := json.Unmarshal(line, &s); err != nil || s.Time.IsZero() {
			if err == nil {
				err = errors.New(`no "time"`)
			}
			bad, badLine = fmt.Errorf("%s line %d: not a pooltop snapshot (%v): give a file written by --record or by watch --headless --json", name, n, err), n
			continue
		}
		seen++
		// A recording made by an older pooltop, or written by hand, may
		// carry query texts as they were: they reach the screen and the
		// output only masked.
		if maskQueries(&s) {
			masked, err := json.Marshal(s)
			if err != nil {
				return fmt.Errorf("%s line %d: %w", name, n, err)
			}
			line = masked
		}
		if err := snapshot(s, line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if bad != nil && seen == 0 {
		return bad // nothing but that line: not a recording at all
	}
	if bad != nil && dropped != nil {
		dropped(badLine)
	}
	return nil
}

// maskQueries masks the query texts of s's sessions with engine.MaskQuery,
// as the collector does when it reads them; it says whether one changed.
func maskQueries(s *Snapshot) bool {
	changed := false
	for i := range s.Waiters {
		if m := engine.MaskQuery(s.Waiters[i].Query); m != s.Waiters[i].Query {
			s.Waiters[i].Query, changed = m, true
		}
	}
	for i := range s.Blockers {
		if m := engine.MaskQuery(s.Blockers[i].Query); m != s.Blockers[i].Query {
			s.Blockers[i].Query, changed = m, true
		}
	}
	return changed
}
