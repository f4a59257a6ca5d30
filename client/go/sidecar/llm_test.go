package sidecar

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
)

// gatedSend keeps each message it is given and returns only when the test lets it: the
// pieces added meanwhile queue behind the write.
type gatedSend struct {
	mu      sync.Mutex
	sent    []*pb.SessionRequest
	started chan struct{} // one value a write begun
	release chan error    // one value a write let finish, with its outcome
}

func newGatedSend() *gatedSend {
	return &gatedSend{started: make(chan struct{}, 1024), release: make(chan error)}
}

func (g *gatedSend) send(req *pb.SessionRequest) error {
	g.mu.Lock()
	g.sent = append(g.sent, req)
	g.mu.Unlock()
	g.started <- struct{}{}
	return <-g.release
}

func (g *gatedSend) messages() []*pb.SessionRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*pb.SessionRequest(nil), g.sent...)
}

// deltasOf is every delta the messages carry, in order, however many a message held.
func deltasOf(messages []*pb.SessionRequest) []*pb.LlmResultDelta {
	var deltas []*pb.LlmResultDelta
	for _, m := range messages {
		if one := m.GetLlmDelta(); one != nil {
			deltas = append(deltas, one)
		}
		deltas = append(deltas, m.GetLlmDeltas().GetDeltas()...)
	}
	return deltas
}

func TestPiecesAddedWhileAWriteIsUnderWayGoTogetherInTheNextMessage(t *testing.T) {
	gate := newGatedSend()
	writer := newDeltaWriter(gate.send, "llm_1", MaxDeltasPerMessage)
	for i := 0; i < 10; i++ {
		if err := writer.add(&pb.LlmResultDelta{Text: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			<-gate.started // the first is being written, alone
		}
	}
	gate.release <- nil
	<-gate.started // the other nine, in one
	gate.release <- nil
	if err := writer.flush(); err != nil {
		t.Fatal(err)
	}

	sent := gate.messages()
	if len(sent) != 2 || sent[0].GetLlmDelta() == nil || len(sent[1].GetLlmDeltas().GetDeltas()) != 9 {
		t.Fatalf("sent %v", sent)
	}
	for i, delta := range deltasOf(sent) {
		if delta.GetRequestId() != "llm_1" || delta.GetIndex() != uint32(i) || delta.GetText() != fmt.Sprint(i) {
			t.Fatalf("delta %d is %v", i, delta)
		}
	}
}

func TestNoMorePiecesQueueBehindAWriteThanOneMessageCarries(t *testing.T) {
	gate := newGatedSend()
	writer := newDeltaWriter(gate.send, "llm_1", 3)
	if err := writer.add(&pb.LlmResultDelta{Text: "0"}); err != nil {
		t.Fatal(err)
	}
	<-gate.started // piece 0 is being written, alone
	added := make(chan int, 16)
	go func() {
		for i := 1; i < 8; i++ {
			_ = writer.add(&pb.LlmResultDelta{Text: fmt.Sprint(i)})
			added <- i
		}
		close(added)
	}()
	for i := 1; i <= 3; i++ { // three queue behind the write; the fourth waits
		<-added
	}
	select {
	case i := <-added:
		t.Fatalf("piece %d was taken with three queued behind a write", i)
	default:
	}
	writer.mu.Lock()
	queued := len(writer.pending)
	writer.mu.Unlock()
	if queued != 3 {
		t.Fatalf("%d pieces queued behind the write", queued)
	}
	go func() {
		for range gate.started {
			gate.release <- nil
		}
	}()
	gate.release <- nil
	for range added {
	}
	if err := writer.flush(); err != nil {
		t.Fatal(err)
	}
	close(gate.started)

	sent := gate.messages()
	for _, m := range sent {
		if n := len(m.GetLlmDeltas().GetDeltas()); n > 3 {
			t.Fatalf("a message carried %d pieces", n)
		}
	}
	for i, delta := range deltasOf(sent) {
		if delta.GetIndex() != uint32(i) {
			t.Fatalf("delta %d is %v", i, delta)
		}
	}
	if got := len(deltasOf(sent)); got != 8 {
		t.Fatalf("%d pieces sent of 8", got)
	}
}

func TestASidecarThatDoesNotTakeBatchesGetsEachPieceAlone(t *testing.T) {
	gate := newGatedSend()
	writer := newDeltaWriter(gate.send, "llm_1", 1)
	go func() {
		for range gate.started {
			gate.release <- nil
		}
	}()
	for i := 0; i < 5; i++ {
		if err := writer.add(&pb.LlmResultDelta{Text: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := writer.flush(); err != nil {
		t.Fatal(err)
	}
	close(gate.started)

	sent := gate.messages()
	for i, m := range sent {
		if m.GetLlmDelta().GetIndex() != uint32(i) {
			t.Fatalf("message %d is %v", i, m)
		}
	}
	if len(sent) != 5 {
		t.Fatalf("%d messages for 5 pieces", len(sent))
	}
}

func TestAFailedWriteIsWhatTheNextPieceAndTheFlushReturn(t *testing.T) {
	gate := newGatedSend()
	writer := newDeltaWriter(gate.send, "llm_1", MaxDeltasPerMessage)
	if err := writer.add(&pb.LlmResultDelta{Text: "a"}); err != nil {
		t.Fatal(err)
	}
	<-gate.started
	broken := errors.New("the stream broke")
	gate.release <- broken
	if err := writer.flush(); !errors.Is(err, broken) {
		t.Fatalf("flush gave %v", err)
	}
	if err := writer.add(&pb.LlmResultDelta{Text: "b"}); !errors.Is(err, broken) {
		t.Fatalf("add gave %v", err)
	}
	if len(gate.messages()) != 1 {
		t.Fatalf("sent %v", gate.messages())
	}
}

func TestASidecarTakesAStreamingLLMFasterThanItIsWrittenEveryPieceInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	const pieces = 2000
	var want strings.Builder
	for i := 0; i < pieces; i++ {
		fmt.Fprintf(&want, "%d ", i)
	}
	var batches bool
	llm := func(_ context.Context, inv *pb.LlmInvocation, send func(*pb.LlmResultDelta) error) (*pb.LlmResult, error) {
		batches = inv.GetAcceptsDeltaBatches()
		for i := 0; i < pieces; i++ {
			if err := send(&pb.LlmResultDelta{Text: fmt.Sprintf("%d ", i)}); err != nil {
				return nil, err
			}
		}
		return &pb.LlmResult{Content: want.String()}, nil
	}
	session, err := client.StartSession(ctx, SessionOptions{
		Spec: &pb.RunSpec{Prompt: "go"}, StreamingLLM: llm, StreamDeltas: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var streamed strings.Builder
	for _, ev := range collect(t, session) {
		streamed.WriteString(ev.GetLlmDelta().GetText())
	}
	result, err := session.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !batches {
		t.Fatal("the sidecar's invocation did not say it takes batches")
	}
	if result.GetContent() != want.String() || streamed.String() != want.String() {
		t.Fatalf("content %d characters, streamed %d, of %d", len(result.GetContent()), streamed.Len(), want.Len())
	}
}

func TestAStreamingLLMsPieceTheSidecarRefusesCancelsTheRunSayingWhy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	llm := func(_ context.Context, _ *pb.LlmInvocation, send func(*pb.LlmResultDelta) error) (*pb.LlmResult, error) {
		index := int32(-1) // a tool call's index is never negative
		_ = send(&pb.LlmResultDelta{ToolCallIndex: &index, ToolCallId: "c", ToolName: "t"})
		return &pb.LlmResult{Content: "done"}, nil
	}
	session, err := client.StartSession(ctx, SessionOptions{Spec: &pb.RunSpec{Prompt: "go"}, StreamingLLM: llm})
	if err != nil {
		t.Fatal(err)
	}
	events := collect(t, session)
	cancelled := events[len(events)-1].GetRunCancelled()
	if !strings.Contains(cancelled.GetReason(), "numbered from 0") {
		t.Fatalf("the run ended with %v", events[len(events)-1])
	}
	if result, err := session.Wait(ctx); err != nil || result.GetStopReason() != pb.StopReason_STOP_REASON_CANCELLED {
		t.Fatalf("Wait gave %v, %v", result, err)
	}
}

func TestSettingBothLLMAndStreamingLLMIsRefused(t *testing.T) {
	llm := func(context.Context, *pb.LlmInvocation) (*pb.LlmResult, error) { return nil, nil }
	streaming := func(context.Context, *pb.LlmInvocation, func(*pb.LlmResultDelta) error) (*pb.LlmResult, error) {
		return nil, nil
	}
	client := &Client{}
	_, err := client.StartSession(context.Background(), SessionOptions{Spec: &pb.RunSpec{}, LLM: llm, StreamingLLM: streaming})
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("got %v", err)
	}
}
