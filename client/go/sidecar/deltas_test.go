package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// longAnswer is a final answer of n words, each about size bytes: the scripted profile
// streams it word by word.
func longAnswer(n, size int) string {
	words := make([]string, n)
	for i := range words {
		words[i] = fmt.Sprintf("w%d%s", i, strings.Repeat("x", size))
	}
	return strings.Join(words, " ")
}

// spelled is the text an iteration's text deltas spell, failing the test if a delta is
// logged (sequence not 0) or its index skips or repeats one.
func spelled(t *testing.T, events []*pb.RunEvent) string {
	t.Helper()
	var text strings.Builder
	next := uint32(0)
	for _, ev := range events {
		delta := ev.GetLlmDelta()
		if delta == nil {
			continue
		}
		if ev.GetSequence() != 0 || delta.GetIndex() != next {
			t.Fatalf("delta with sequence %d and index %d, expected index %d", ev.GetSequence(), delta.GetIndex(), next)
		}
		next = delta.GetIndex() + delta.GetCount()
		text.WriteString(delta.GetText())
	}
	return text.String()
}

// A session with StreamDeltas hands out the model's answer as it streams, before the
// llm_responded event that holds it whole; the logged events keep their sequence.
func TestASessionWithStreamDeltasHandsOutTheAnswerAsItStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	answer := longAnswer(40, 5)
	s, err := client.StartSession(ctx, SessionOptions{Spec: scriptedSpec(t, scriptTurn{Content: answer}), StreamDeltas: true})
	if err != nil {
		t.Fatal(err)
	}
	events := collect(t, s)
	if got := spelled(t, events); got != answer {
		t.Fatalf("the deltas spell %q", got)
	}
	var logged []*pb.RunEvent
	for _, ev := range events {
		if ev.GetLlmDelta() == nil {
			logged = append(logged, ev)
		} else if len(logged) > 0 && logged[len(logged)-1].GetLlmResponded() != nil {
			t.Fatal("a delta came after the llm_responded that supersedes it")
		}
	}
	for i, ev := range logged {
		if ev.GetSequence() != uint64(i+1) {
			t.Fatalf("logged event %d has sequence %d", i, ev.GetSequence())
		}
	}
}

// Without StreamDeltas a session hands out the logged events only.
func TestASessionWithoutStreamDeltasHandsOutNoDelta(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	s, err := client.StartSession(ctx, SessionOptions{Spec: scriptedSpec(t, scriptTurn{Content: longAnswer(10, 5)})})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range collect(t, s) {
		if ev.GetLlmDelta() != nil {
			t.Fatalf("a delta came: %v", ev)
		}
	}
}

// A watcher with StreamDeltas that the sidecar drops mid-answer reconnects and returns each
// piece of the answer once: the call's deltas the sidecar sends again are trimmed, so the
// indexes run on without a gap and the text is the answer.
func TestAWatcherReconnectedMidAnswerReturnsEachPieceOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	config := filepath.Join(t.TempDir(), "sidecar.toml")
	if err := os.WriteFile(config, []byte("[profiles.slow]\nkind = \"scripted\"\nstream_delay = 0.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A 4 KiB window and a 0.3 s stall: a watcher that stops acknowledging is dropped after
	// some 4 of the answer's 48 deltas of 1 KB, 0.1 s apart (the scripted profile streams a
	// word a delta, up to 48 deltas), less than a second into the answer's 4.8 s.
	client := dial(t, ctx, startSidecar(t, nil, "--config", config, "--watch-window-bytes", "4096", "--watcher-stall-s", "0.3"))
	answer := longAnswer(48, 1000)
	script, _ := json.Marshal([]scriptTurn{{Content: answer}})
	s, err := client.StartSession(ctx, SessionOptions{Spec: &pb.RunSpec{Prompt: "go", Llm: &pb.LlmSelection{Profile: "slow", Script: string(script)}}})
	if err != nil {
		t.Fatal(err)
	}
	next(t, s) // run_started: the run exists
	go func() {
		for range s.Events() { // the session's own reader keeps up
		}
	}()
	w, err := client.Watch(ctx, s.RunID(), WatchOptions{StreamDeltas: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var events []*pb.RunEvent
	reconnected := false
	for {
		ev, err := w.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
		if ev.GetLlmDelta() != nil && !reconnected {
			// Stall: take the stream's messages without handling or acknowledging them, as
			// a watcher that stopped working would, until the sidecar drops the stream.
			var dropped error
			for dropped == nil {
				_, dropped = w.stream.Recv()
			}
			if status.Code(dropped) != codes.ResourceExhausted {
				t.Fatalf("the stalled stream ended with %v", dropped)
			}
			w.pending, w.ackDue = nil, false // what the stalled reader took is gone with it
			if resumed, err := w.resume(dropped); !resumed {
				t.Fatalf("did not resume: %v", err)
			}
			reconnected = true
		}
		if ev.GetLlmDelta() == nil && w.LastSequence() != ev.GetSequence() {
			t.Fatalf("LastSequence %d after event %d", w.LastSequence(), ev.GetSequence())
		}
	}
	if !reconnected {
		t.Fatal("no delta came")
	}

	if got := spelled(t, events); got != answer {
		t.Fatalf("the deltas spell %d bytes of the answer's %d", len(got), len(answer))
	}
}

func textDelta(iteration int32, index, count uint32, text string) *pb.RunEvent {
	return &pb.RunEvent{Payload: &pb.RunEvent_LlmDelta{LlmDelta: &pb.LlmDelta{Iteration: iteration, Index: index, Count: count, Text: text}}}
}

func toolDelta(index uint32, tool int32, id, name, arguments string) *pb.RunEvent {
	return &pb.RunEvent{Payload: &pb.RunEvent_LlmDelta{LlmDelta: &pb.LlmDelta{
		Iteration: 1, Index: index, Count: 1, ToolCallIndex: &tool, ToolCallId: id, ToolName: name, Arguments: arguments,
	}}}
}

// After a reconnection the catch-up delta (the call's deltas from index 0, joined) is
// trimmed to what was not handed out, and the live deltas after it pass as they are.
func TestDeltaDedupTrimsTheCatchUpToWhatIsNew(t *testing.T) {
	d := newDeltaDedup()
	for i, piece := range []string{"The ", "capital "} {
		if got := d.admit(textDelta(1, uint32(i), 1, piece)); got.GetLlmDelta().GetText() != piece {
			t.Fatalf("delta %d became %v", i, got)
		}
	}
	d.connected()
	caught := d.admit(textDelta(1, 0, 3, "The capital is ")).GetLlmDelta()
	if caught.GetText() != "is " || caught.GetIndex() != 2 || caught.GetCount() != 1 {
		t.Fatalf("the catch-up became %v", caught)
	}
	if live := d.admit(textDelta(1, 3, 1, "Paris")).GetLlmDelta(); live.GetText() != "Paris" || live.GetIndex() != 3 {
		t.Fatalf("the live delta became %v", live)
	}
	d.connected()
	if again := d.admit(textDelta(1, 0, 4, "The capital is Paris")); again != nil {
		t.Fatalf("a catch-up of nothing new was handed out: %v", again)
	}
}

// A tool call's catch-up keeps only the arguments not handed out, without the id and name
// its first delta carried.
func TestDeltaDedupTrimsAToolCallsArgumentsAndDropsItsIdAndName(t *testing.T) {
	d := newDeltaDedup()
	d.admit(toolDelta(0, 0, "c1", "echo", `{"text":`))
	d.connected()
	joined := toolDelta(0, 0, "c1", "echo", `{"text":"hi"}`)
	joined.GetLlmDelta().Count = 2
	caught := d.admit(joined).GetLlmDelta()
	if caught.GetArguments() != `"hi"}` || caught.GetToolCallId() != "" || caught.GetToolName() != "" || caught.GetIndex() != 1 {
		t.Fatalf("the catch-up became %v", caught)
	}
	if joined.GetLlmDelta().GetArguments() != `{"text":"hi"}` {
		t.Fatal("admit changed the event it was given")
	}
}
