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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// next is the session's next event, failing the test if none comes.
func next(t *testing.T, s *Session) *pb.RunEvent {
	t.Helper()
	select {
	case ev, ok := <-s.Events():
		if !ok {
			t.Fatal("the session's events ended early")
		}
		return ev
	case <-time.After(testWait):
		t.Fatalf("no event came in %s", testWait)
	}
	return nil
}

// watchUntil follows runID until an event for which stop is true, and returns it.
func watchUntil(t *testing.T, ctx context.Context, client *Client, runID string, stop func(*pb.RunEvent) bool) *pb.RunEvent {
	t.Helper()
	w, err := client.Watch(ctx, runID, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("watching %s: %v", runID, err)
		}
		if stop(ev) {
			return ev
		}
	}
}

// A reader that stops taking events holds the session back: it reads no more of the stream,
// so the tool call behind the unread events is not invoked before its deadline and times
// out (a watcher sees it), and once the reader goes on it gets every event, none dropped.
func TestASlowReaderHoldsTheSessionBackAndMissesNoEvent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	called := make(chan struct{}, 1)
	slow := Tool{Name: "slow", Timeout: 500 * time.Millisecond, Func: func(context.Context, json.RawMessage) (any, error) {
		called <- struct{}{}
		return "ok", nil
	}}
	spec := scriptedSpec(t,
		scriptTurn{ToolCalls: []scriptCall{{ID: "c1", Name: "slow", Arguments: map[string]any{}}}},
		scriptTurn{Content: "done"},
	)
	s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{slow}, EventBuffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	first := next(t, s) // run_started; then the reader pauses
	timedOut := watchUntil(t, ctx, client, s.RunID(), func(ev *pb.RunEvent) bool {
		return ev.GetToolCallCompleted() != nil
	}).GetToolCallCompleted().GetRecord()
	if timedOut.GetErrorKind() != pb.ErrorKind_ERROR_KIND_TIMEOUT {
		t.Fatalf("while the reader paused the call ended %v (%s)", timedOut.GetErrorKind(), timedOut.GetError())
	}
	select {
	case <-called:
		t.Fatal("the tool ran while the reader paused")
	default:
	}
	events := append([]*pb.RunEvent{first}, collect(t, s)...)
	for i, ev := range events {
		if ev.GetSequence() != uint64(i+1) {
			t.Fatalf("event %d has sequence %d: an event was dropped", i, ev.GetSequence())
		}
	}
	if !isTerminal(events[len(events)-1]) {
		t.Fatalf("the last event is %v", events[len(events)-1])
	}
	result, err := s.Wait(ctx)
	if err != nil || result.GetContent() != "done" {
		t.Fatalf("result %v, %v", result, err)
	}
}

// With DiscardEvents nobody needs to read Events (closed at once): Wait returns the result.
func TestDiscardEventsLetsACallerWaitForTheResultAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	spec, tool := manyCalls(t, 20)
	s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{tool}, DiscardEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, open := <-s.Events(); open {
		t.Fatal("Events handed out an event")
	}
	result, err := s.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if result.GetContent() != "done" || len(result.GetToolCallHistory()) != 20 {
		t.Fatalf("result %q with %d records", result.GetContent(), len(result.GetToolCallHistory()))
	}
}

// Wait gives up when its own context ends first, and the run goes on.
func TestWaitReturnsWhenItsContextEndsAndTheRunGoesOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	release := make(chan struct{})
	hold := Tool{Name: "hold", Func: func(context.Context, json.RawMessage) (any, error) {
		<-release
		return "released", nil
	}}
	spec := scriptedSpec(t,
		scriptTurn{ToolCalls: []scriptCall{{ID: "c1", Name: "hold", Arguments: map[string]any{}}}},
		scriptTurn{Content: "done"},
	)
	s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{hold}, DiscardEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	expired, stop := context.WithCancel(ctx)
	stop()
	if _, err := s.Wait(expired); err != context.Canceled {
		t.Fatalf("Wait with an ended context returned %v", err)
	}
	close(release)
	result, err := s.Wait(ctx)
	if err != nil || result.GetContent() != "done" {
		t.Fatalf("result %v, %v", result, err)
	}
}

// A run that ends with run_failed is a *RunFailedError whose Code is a codes.Code, and a
// gRPC status error with that code.
func TestAFailedRunIsAStatusErrorWithItsCode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	llm := func(context.Context, *pb.LlmInvocation) (*pb.LlmResult, error) {
		return nil, fmt.Errorf("the model is down")
	}
	s, err := client.StartSession(ctx, SessionOptions{Spec: &pb.RunSpec{Prompt: "hi"}, LLM: llm, DiscardEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Wait(ctx)
	failed, ok := err.(*RunFailedError)
	if !ok {
		t.Fatalf("Wait returned %T %v", err, err)
	}
	if failed.Code != codes.Unavailable || status.Code(err) != failed.Code {
		t.Fatalf("code %v, status.Code %v", failed.Code, status.Code(err))
	}
	if got := status.Convert(err).Message(); !strings.Contains(got, "the model is down") {
		t.Fatalf("the status's message is %q", got)
	}
	if failed.Result.GetStopReason() != pb.StopReason_STOP_REASON_ERROR {
		t.Fatalf("the partial result's stop reason is %v", failed.Result.GetStopReason())
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

// noSessionGoroutineLeft fails the test if a goroutine of a session is still running once
// they have had a generous while to end (they end just after they signal the end).
func noSessionGoroutineLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	left := sessionGoroutines()
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		left = sessionGoroutines()
	}
	if len(left) > 0 {
		t.Fatalf("%d session goroutines left after the session ended:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// Once Wait has returned no goroutine of a session that discards its events is left,
// though the session's context has not ended.
func TestNoSessionGoroutineOutlivesARunThatDiscardsItsEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	spec, tool := manyCalls(t, 3)
	s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{tool}, DiscardEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	noSessionGoroutineLeft(t)
}

// A session whose reader stopped and whose context then ends cancels its run, and drops the
// stream after CancelGrace: Wait returns, and no goroutine of the session is left.
func TestASessionNobodyReadsEndsAfterItsContextDoes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	spec, tool := manyCalls(t, 3)
	runCtx, stopRun := context.WithCancel(ctx)
	s, err := client.StartSession(runCtx, SessionOptions{Spec: spec, Tools: []Tool{tool}, EventBuffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	next(t, s) // run_started; then nobody reads
	stopRun()
	end := watchUntil(t, ctx, client, s.RunID(), isTerminal)
	if end.GetRunCancelled() == nil {
		t.Fatalf("the run ended with %v", end)
	}
	if _, err := s.Wait(ctx); status.Code(err) != codes.Canceled {
		t.Fatalf("Wait returned %v", err)
	}
	noSessionGoroutineLeft(t)
}
