// Package faultproxy is a TCP proxy on loopback between PostgreSQL clients
// and their server that injects the network's faults on demand: a server
// that is down (every connection cut, each new one closed at once), a
// partition (every connection stalls, both ways, for a while: longer than a
// lease, the holder's commit arrives after its lease has passed) and a lost
// acknowledgement (the connection is cut around the next commit, either
// after the server executed it and before its answer reached the client, or
// before the server saw it).
//
// It reads the client's side of the PostgreSQL protocol only as far as it
// needs to: message boundaries, the statements a Parse or Query carries and
// the statement a Bind executes, so that it knows which batch (up to its
// Sync) holds a commit. The server's side is read for message boundaries and
// ReadyForQuery, which ends each batch's answer.
package faultproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from Addr to the target.
type Proxy struct {
	ln     net.Listener
	target string
	// Marker is the text that makes a statement a commit (default
	// "INSERT INTO business_ledger").
	marker []byte

	mu      sync.Mutex
	conns   map[*pconn]struct{}
	until   time.Time     // a partition lasts until then
	healed  chan struct{} // closed when the partition ends
	cut     *cutOrder     // the next commit's fate, nil for none
	down    bool          // new connections are closed at once
	stopped bool

	// Cuts counts the commits cut, by whether the server executed them.
	CutDelivered, CutDropped atomic.Int64
	wg                       sync.WaitGroup
}

type cutOrder struct {
	delivered bool
	done      chan struct{} // closed once the cut happened
}

// New listens on a free loopback port and forwards to target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	healed := make(chan struct{})
	close(healed)
	p := &Proxy{ln: ln, target: target, marker: []byte("INSERT INTO business_ledger"), conns: map[*pconn]struct{}{}, healed: healed}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is host:port to connect to instead of the server.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Close stops accepting, cuts every connection and waits for them.
func (p *Proxy) Close() error {
	p.cutAll(func() { p.stopped = true })
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// Down makes the proxy a server that is not running: it cuts every
// connection and closes each new one at once, until Up.
func (p *Proxy) Down() { p.cutAll(func() { p.down = true }) }

// cutAll runs mark under the lock, so that no new connection is kept, and
// then cuts every connection open at that moment.
func (p *Proxy) cutAll(mark func()) {
	p.mu.Lock()
	mark()
	conns := make([]*pconn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Up ends Down: new connections reach the target again.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Partition stalls every connection, both ways, for d: bytes wait in the
// proxy and flow again afterwards, as after a network partition that
// heals. New connections wait too.
func (p *Proxy) Partition(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.until) {
		p.until = time.Now().Add(d)
		return
	}
	p.until = time.Now().Add(d)
	ch := make(chan struct{})
	p.healed = ch
	go func() {
		for {
			p.mu.Lock()
			left := time.Until(p.until)
			if left <= 0 {
				close(ch)
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			time.Sleep(left)
		}
	}()
}

// CutNextCommit cuts the connection that sends the next commit. delivered:
// the server receives and executes it and the client never hears back
// (the commit happened, its answer was lost); otherwise the commit never
// reaches the server. The returned channel is closed once it happened.
func (p *Proxy) CutNextCommit(delivered bool) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := &cutOrder{delivered: delivered, done: make(chan struct{})}
	p.cut = o
	return o.done
}

// CancelCut withdraws a cut that has not happened yet; it reports whether
// there was one.
func (p *Proxy) CancelCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	had := p.cut != nil
	p.cut = nil
	return had
}

// wait blocks while a partition lasts.
func (p *Proxy) wait() {
	p.mu.Lock()
	ch := p.healed
	p.mu.Unlock()
	<-ch
}

// takeCut returns the pending cut order and clears it.
func (p *Proxy) takeCut() *cutOrder {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.cut
	p.cut = nil
	return o
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		p.wait()
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		pc := &pconn{p: p, client: c, server: s, commitStmts: map[string]bool{}}
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			pc.close()
			continue
		}
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go pc.clientToServer()
		go pc.serverToClient()
	}
}

// pconn is one proxied connection.
type pconn struct {
	p              *Proxy
	client, server net.Conn
	once           sync.Once

	commitStmts map[string]bool // prepared statements that are commits (client side only)
	syncs       atomic.Int64    // Syncs (and simple Queries) forwarded
	cutAt       atomic.Int64    // close after the answer to this many batches (0: no cut)
}

func (c *pconn) close() {
	c.once.Do(func() {
		_ = c.client.Close()
		_ = c.server.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// readMsg reads one typed message: its type byte and the whole message.
func readMsg(r io.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	if n < 4 || n > 1<<30 {
		return 0, nil, errors.New("faultproxy: bad message length")
	}
	msg := make([]byte, 5+n-4)
	copy(msg, hdr[:])
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return 0, nil, err
	}
	return hdr[0], msg, nil
}

// cstring returns the NUL-terminated string at the start of b and the rest.
func cstring(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

func (c *pconn) clientToServer() {
	defer c.p.wg.Done()
	defer c.close()
	// The startup packet (and an SSLRequest before it) has no type byte.
	if err := c.forwardStartup(); err != nil {
		return
	}
	var batch [][]byte
	commit := false
	for {
		typ, msg, err := readMsg(c.client)
		if err != nil {
			return
		}
		body := msg[5:]
		switch typ {
		case 'P': // Parse: name, query
			name, rest := cstring(body)
			q, _ := cstring(rest)
			c.commitStmts[name] = bytes.Contains([]byte(q), c.p.marker)
		case 'B': // Bind: portal, statement
			_, rest := cstring(body)
			stmt, _ := cstring(rest)
			commit = commit || c.commitStmts[stmt]
		case 'Q': // a simple query is a batch of its own
			q, _ := cstring(body)
			commit = commit || bytes.Contains([]byte(q), c.p.marker)
		case 'X': // Terminate
			_, _ = c.server.Write(msg)
			return
		}
		batch = append(batch, msg)
		// The extended protocol's messages wait for the Sync (or Flush)
		// that ends their batch; anything else (a simple Query, a password
		// during startup, COPY data) goes at once.
		if typ == 'P' || typ == 'B' || typ == 'D' || typ == 'E' || typ == 'C' {
			continue
		}
		counts := typ == 'S' || typ == 'Q' // the server answers with ReadyForQuery
		// A batch is complete: forward it, unless it is the commit to cut.
		c.p.wait()
		if commit {
			if o := c.p.takeCut(); o != nil {
				if !o.delivered {
					c.p.CutDropped.Add(1)
					close(o.done)
					return // the commit never reaches the server
				}
				n := c.syncs.Add(1)
				c.cutAt.Store(n)
				if !c.write(batch) {
					return
				}
				c.p.CutDelivered.Add(1)
				close(o.done) // the answer is dropped by serverToClient
				batch, commit = nil, false
				continue
			}
		}
		if counts {
			c.syncs.Add(1)
		}
		if !c.write(batch) {
			return
		}
		batch, commit = nil, false
	}
}

func (c *pconn) write(batch [][]byte) bool {
	for _, m := range batch {
		if _, err := c.server.Write(m); err != nil {
			return false
		}
	}
	return true
}

// forwardStartup forwards the untyped packets up to the startup message:
// an SSLRequest or GSSENCRequest is refused on the server's behalf ('N'),
// so that the stream stays readable.
func (c *pconn) forwardStartup() error {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(c.client, hdr[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		code := binary.BigEndian.Uint32(hdr[4:])
		if n < 8 || n > 1<<20 {
			return errors.New("faultproxy: bad startup packet")
		}
		if code == 80877103 || code == 80877104 { // SSLRequest, GSSENCRequest
			if _, err := c.client.Write([]byte{'N'}); err != nil {
				return err
			}
			continue
		}
		rest := make([]byte, n-8)
		if _, err := io.ReadFull(c.client, rest); err != nil {
			return err
		}
		c.p.wait()
		_, err := c.server.Write(append(hdr[:], rest...))
		return err
	}
}

func (c *pconn) serverToClient() {
	defer c.p.wg.Done()
	defer c.close()
	// ReadyForQuery ends the answer to each batch; the first one ends the
	// startup, and answers no batch.
	answered := int64(-1)
	for {
		typ, msg, err := readMsg(c.server)
		if err != nil {
			return
		}
		before := answered // this message answers batch before+1
		if typ == 'Z' {
			answered++
		}
		if cut := c.cutAt.Load(); cut > 0 && before+1 >= cut {
			// Nothing of the answer to the cut batch reaches the client;
			// once the server has answered it, the connection goes.
			if typ == 'Z' {
				return
			}
			continue
		}
		c.p.wait()
		if _, err := c.client.Write(msg); err != nil {
			return
		}
	}
}
