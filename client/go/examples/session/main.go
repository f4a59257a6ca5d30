// Command session hosts two Go tools in a Session with a running sidecar, prints each
// ToolCallRecord as it arrives, then the final result. It starts nothing itself:
//
//	.venv/bin/cleveragents-sidecar serve --listen 127.0.0.1:50051   # in another terminal
//	go run ./examples/session 127.0.0.1:50051
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/cleveragents/cleveragents-sidecar/client/go/sidecar"
	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
)

var capitals = map[string]string{"France": "Paris", "Japan": "Tokyo"}

// tools: a function of a typed input returning a struct, and one returning a number, which
// is recorded as {"result": n}.
var tools = []sidecar.Tool{
	{
		Name:        "capital_of",
		Description: "The capital city of a country.",
		InputSchema: `{"type":"object","properties":{"country":{"type":"string"}},"required":["country"]}`,
		Func: func(_ context.Context, input json.RawMessage) (any, error) {
			var in struct{ Country string }
			if err := json.Unmarshal(input, &in); err != nil {
				return nil, err
			}
			capital, ok := capitals[in.Country]
			if !ok {
				return nil, fmt.Errorf("no capital on file for %s", in.Country)
			}
			return struct {
				Country string `json:"country"`
				Capital string `json:"capital"`
			}{in.Country, capital}, nil
		},
	},
	{
		Name:        "word_count",
		Description: "The number of words in a text.",
		InputSchema: `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`,
		Func: func(_ context.Context, input json.RawMessage) (any, error) {
			var in struct{ Text string }
			if err := json.Unmarshal(input, &in); err != nil {
				return nil, err
			}
			return len(strings.Fields(in.Text)), nil
		},
	},
}

// script is what the sidecar's scripted profile plays as the model: no API key needed.
const script = `[
  {"content": "I'll look up both capitals at once.",
   "tool_calls": [
     {"id": "call_1", "name": "capital_of", "arguments": {"country": "France"}},
     {"id": "call_2", "name": "capital_of", "arguments": {"country": "Atlantis"}}],
   "usage": {"input_tokens": 410, "output_tokens": 31}},
  {"content": "Counting the words of my answer.",
   "tool_calls": [
     {"id": "call_3", "name": "word_count", "arguments": {"text": "The capital of France is Paris."}}],
   "usage": {"input_tokens": 520, "output_tokens": 22}},
  {"content": "The capital of France is Paris (6 words). Atlantis is not on file.",
   "usage": {"input_tokens": 600, "output_tokens": 45}}
]`

func main() {
	target := os.Getenv("SIDECAR_ADDRESS")
	if len(os.Args) > 1 {
		target = os.Args[1]
	}
	if target == "" {
		target = "127.0.0.1:50051"
	}
	// Ctrl-C cancels the run: the session sends SessionCancel and the run ends cancelled.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	client, err := sidecar.Dial(ctx, target, sidecar.WithToken(os.Getenv("SIDECAR_TOKEN")))
	if err != nil {
		fail(err)
	}
	defer client.Close()
	ready, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := client.WaitForReady(ready); err != nil {
		fail(fmt.Errorf("no sidecar answers at %s; start one with: cleveragents-sidecar serve", target))
	}

	spec := &pb.RunSpec{
		Prompt: "What are the capitals of France and Atlantis?",
		Llm:    &pb.LlmSelection{Script: script},
	}
	session, err := client.StartSession(ctx, sidecar.SessionOptions{Spec: spec, Tools: tools})
	if err != nil {
		fail(err)
	}
	for event := range session.Events() {
		completed := event.GetToolCallCompleted()
		if completed == nil {
			continue
		}
		r := completed.GetRecord()
		outcome := "ok      " + r.GetOutput()
		if !r.GetSuccess() {
			outcome = "FAILED  " + r.GetError()
		}
		fmt.Printf("%-4s %s  %-10s %6.1f ms  %s\n",
			fmt.Sprintf("#%d", event.GetSequence()), r.GetCallId(), r.GetToolName(), r.GetDurationMs(), outcome)
	}
	result, err := session.Wait(ctx)
	if err != nil {
		fail(err)
	}
	failed := 0
	for _, r := range result.GetToolCallHistory() {
		if !r.GetSuccess() {
			failed++
		}
	}
	fmt.Printf("\nfinal answer: %s\n", result.GetContent())
	fmt.Printf("%s, %d iterations, %d tool calls (%d failed), tokens in/out %d/%d\n",
		result.GetStopReason(), result.GetIterations(), len(result.GetToolCallHistory()), failed,
		result.GetUsage().GetInputTokens(), result.GetUsage().GetOutputTokens())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
