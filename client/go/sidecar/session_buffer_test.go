package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
)

// manyCalls is a run of n calls of a tool returning "ok", then the answer "done".
func manyCalls(t *testing.T, n int) (*pb.RunSpec, Tool) {
	t.Helper()
	ok := Tool{Name: "ok", Func: func(context.Context, json.RawMessage) (any, error) { return "ok", nil }}
	var calls []scriptCall
	for i := 0; i < n; i++ {
		calls = append(calls, scriptCall{ID: fmt.Sprintf("c%d", i), Name: "ok", Arguments: map[string]any{}})
	}
	return scriptedSpec(t, scriptTurn{ToolCalls: calls}, scriptTurn{Content: "done"}), ok
}

// A session whose Events nobody reads holds at most EventBuffer events: the oldest are dropped
// and counted, its calls are answered, Wait returns the result, and the terminal event is last.
func TestUnreadEventsAreBoundedTheOldestDroppedAndWaitStillReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	spec, tool := manyCalls(t, 20)
	s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{tool}, EventBuffer: 4})
	if err != nil {
		t.Fatal(err)
	}
	result, err := s.Wait() // Events not read yet
	if err != nil {
		t.Fatal(err)
	}
	if result.GetContent() != "done" || len(result.GetToolCallHistory()) != 20 {
		t.Fatalf("result %q with %d records", result.GetContent(), len(result.GetToolCallHistory()))
	}
	events := collect(t, s)
	if len(events) != 4 || !isTerminal(events[3]) {
		t.Fatalf("%d events left, the last %v", len(events), events[len(events)-1])
	}
	last := events[3].GetSequence()
	for i, ev := range events {
		if ev.GetSequence() != last-3+uint64(i) {
			t.Fatalf("event %d has sequence %d, the last %d", i, ev.GetSequence(), last)
		}
	}
	if s.DroppedEvents() != int64(last)-4 {
		t.Fatalf("%d dropped, %d events of which 4 kept", s.DroppedEvents(), last)
	}
}

// sessionGoroutines are the stacks of goroutines running a Session method.
func sessionGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, stack := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(stack, "sidecar.(*Session).") {
			found = append(found, stack)
		}
	}
	return found
}

// Once Wait has returned no goroutine of the session is left, though Events was never read
// and the session's context has not ended.
func TestNoSessionGoroutineOutlivesARunWhoseEventsAreNotRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	spec, tool := manyCalls(t, 3)
	s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{tool}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	// Goroutines end just after they signal the end: look again until a generous deadline.
	deadline := time.Now().Add(10 * time.Second)
	left := sessionGoroutines()
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		left = sessionGoroutines()
	}
	if len(left) > 0 {
		t.Fatalf("%d session goroutines left after Wait returned:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}
