package sidecar

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// cuttableProxy forwards TCP connections to a sidecar; cut resets every connection open.
type cuttableProxy struct {
	address string
	mu      sync.Mutex
	conns   map[net.Conn]bool
}

func newCuttableProxy(t *testing.T, target string) *cuttableProxy {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttableProxy{address: listener.Addr().String(), conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		_ = listener.Close()
		p.cut()
	})
	go func() {
		for {
			down, err := listener.Accept()
			if err != nil {
				return // the listener is closed
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = down.Close()
				continue
			}
			p.track(down, up)
			go p.pipe(down, up)
			go p.pipe(up, down)
		}
	}()
	return p
}

func (p *cuttableProxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, conn := range conns {
		p.conns[conn] = true
	}
}

// pipe copies from one side to the other; when either side ends, both are closed.
func (p *cuttableProxy) pipe(from, to net.Conn) {
	_, _ = io.Copy(to, from)
	_ = from.Close()
	_ = to.Close()
}

// cut resets every connection (RST, as a dropped network would), and forgets them.
func (p *cuttableProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for conn := range p.conns {
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
		_ = conn.Close()
		delete(p.conns, conn)
	}
}

// A session whose connection drops while its tool runs re-attaches (Reattach): the answer
// lost with the old stream is sent again when the sidecar asks again, the tool runs once,
// and the run completes with every event once, in order.
func TestASessionReattachesAfterItsConnectionDropsAndRunsTheToolOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	proxy := newCuttableProxy(t, startSidecar(t, nil))
	client := dial(t, ctx, proxy.address)
	var calls atomic.Int32
	remote := Tool{Name: "remote", Func: func(context.Context, json.RawMessage) (any, error) {
		calls.Add(1)
		proxy.cut() // the answer goes out on a dead stream
		return map[string]string{"answer": "after the drop"}, nil
	}}
	spec := scriptedSpec(t,
		scriptTurn{ToolCalls: []scriptCall{{ID: "r1", Name: "remote", Arguments: map[string]any{}}}},
		scriptTurn{Content: "done"},
	)
	s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{remote}, Reattach: true})
	if err != nil {
		t.Fatal(err)
	}
	events := collect(t, s)
	result, err := s.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Fatalf("the tool ran %d times", calls.Load())
	}
	for i, ev := range events {
		if ev.GetSequence() != uint64(i+1) {
			t.Fatalf("event %d has sequence %d", i, ev.GetSequence())
		}
	}
	if events[len(events)-1].GetRunCompleted() == nil || result.GetContent() != "done" {
		t.Fatalf("the run ended with %v, %q", events[len(events)-1], result.GetContent())
	}
	rec := result.GetToolCallHistory()[0]
	if !rec.GetSuccess() || !strings.Contains(rec.GetOutput(), "after the drop") {
		t.Fatalf("the call's record: %v", rec)
	}
}

// Without Reattach a dropped connection ends the session with UNAVAILABLE.
func TestASessionWithoutReattachEndsWhenItsConnectionDrops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	proxy := newCuttableProxy(t, startSidecar(t, nil))
	client := dial(t, ctx, proxy.address)
	cut := Tool{Name: "cut", Func: func(context.Context, json.RawMessage) (any, error) {
		proxy.cut()
		return "cut", nil
	}}
	spec := scriptedSpec(t,
		scriptTurn{ToolCalls: []scriptCall{{ID: "c1", Name: "cut", Arguments: map[string]any{}}}},
		scriptTurn{Content: "done"},
	)
	s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{cut}, DiscardEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("Wait returned %v", err)
	}
}
