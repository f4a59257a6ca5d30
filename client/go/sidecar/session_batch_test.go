package sidecar

import (
	"context"
	"fmt"
	"sync"
	"testing"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
	"google.golang.org/grpc"
)

// wire counts a Session stream's messages as gRPC carries them.
type wire struct {
	mu        sync.Mutex
	start     *pb.SessionStart
	responses int
	batched   int // responses that carried events in SessionResponse.events
}

func (w *wire) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	stream, err := streamer(ctx, desc, cc, method, opts...)
	return &countedStream{ClientStream: stream, wire: w}, err
}

type countedStream struct {
	grpc.ClientStream
	wire *wire
}

func (s *countedStream) SendMsg(m any) error {
	if start := m.(*pb.SessionRequest).GetStart(); start != nil {
		s.wire.mu.Lock()
		s.wire.start = start
		s.wire.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.wire.mu.Lock()
		s.wire.responses++
		if len(m.(*pb.SessionResponse).GetEvents()) > 0 {
			s.wire.batched++
		}
		s.wire.mu.Unlock()
	}
	return err
}

func TestASessionTakesTheEventsBeforeAnInvocationInItsMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	counted := &wire{}
	client := dial(t, ctx, startSidecar(t, nil), WithDialOptions(grpc.WithStreamInterceptor(counted.intercept)))
	const iterations = 20
	var turns []scriptTurn
	for i := 0; i < iterations-1; i++ {
		turns = append(turns, scriptTurn{ToolCalls: []scriptCall{{ID: fmt.Sprintf("c%d", i), Name: "ok", Arguments: map[string]any{}}}})
	}
	turns = append(turns, scriptTurn{Content: "done"})
	_, tool := manyCalls(t, 0)
	s, err := client.StartSession(ctx, SessionOptions{Spec: scriptedSpec(t, turns...), Tools: []Tool{tool}})
	if err != nil {
		t.Fatal(err)
	}
	events := collect(t, s)
	if _, err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	if !counted.start.GetBatchEvents() {
		t.Fatal("the session did not ask for batched events")
	}
	if len(events) != 4*iterations || !isTerminal(events[len(events)-1]) {
		t.Fatalf("%d events, the last %v", len(events), events[len(events)-1])
	}
	for i, ev := range events {
		if ev.GetSequence() != uint64(i+1) {
			t.Fatalf("event %d has sequence %d", i, ev.GetSequence())
		}
	}
	// One an event and one an invocation would be 5 an iteration.
	if counted.batched == 0 || counted.responses >= 5*iterations {
		t.Fatalf("%d responses (%d batched) for %d events and %d invocations", counted.responses,
			counted.batched, len(events), iterations-1)
	}
	t.Logf("%d responses for %d iterations", counted.responses, iterations)
}
