package demo

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/pgembed"
)

// notes is a Recorder that keeps the notes.
type notes struct {
	mu    sync.Mutex
	texts []string
}

func (n *notes) Note(_ collector.EventKind, text string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.texts = append(n.texts, text)
}
func (n *notes) Reset(bool) {}
func (n *notes) Suspend()   {}

// The dashboard's S stops a real server hard (it refuses connections) and
// starts it again (it answers), each logged as an event.
func TestOutageStopsAndStartsAServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgembed.Start(ctx, pgembed.Options{})
	if err != nil {
		t.Fatalf("start a throwaway server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	rec := &notes{}
	st := OutageStage{Stage: &Stage{Collector: rec}, Outage: &Outage{Name: "s2", Halt: srv.Halt, Resume: srv.Resume}}
	answers := func() bool {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, srv.DSN())
		if err != nil {
			return false
		}
		conn.Close(cctx)
		return true
	}

	what, err := st.ToggleServer()
	if err != nil || !strings.Contains(what, "server s2 stopped hard") || answers() {
		t.Fatalf("first S: %q, %v; the server answers: %v", what, err, answers())
	}
	what, err = st.ToggleServer()
	if err != nil || !strings.Contains(what, "server s2 started again") || !answers() {
		t.Fatalf("second S: %q, %v; the server answers: %v", what, err, answers())
	}
	if len(rec.texts) != 2 {
		t.Fatalf("events %q, want the stop and the start", rec.texts)
	}
}
