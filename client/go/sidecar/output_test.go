package sidecar

import (
	"context"
	"errors"
	"strings"
	"testing"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// citySchema is hand-written JSON Schema text: the Go client derives none from structs.
const citySchema = `{"type":"object","properties":{"city":{"type":"string"},"population":{"type":"integer"}},"required":["city","population"],"additionalProperties":false}`

type city struct {
	City       string `json:"city"`
	Population int    `json:"population"`
}

func cityOutput() *pb.OutputSchema {
	return &pb.OutputSchema{Name: "city", Schema: citySchema, Description: "A city and its population."}
}

func TestAScriptedRunReturnsTheValidatedAnswerIntoAStruct(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	spec := &pb.RunSpec{
		Prompt:       "Which city?",
		Llm:          &pb.LlmSelection{Script: `[{"output": {"city": "Lyon", "population": 522000}}]`},
		OutputSchema: cityOutput(),
	}
	resp, err := client.RPC.RunToolLoop(ctx, &pb.RunToolLoopRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	var got city
	if err := DecodeOutput(resp.GetResult(), &got); err != nil {
		t.Fatal(err)
	}
	if got != (city{"Lyon", 522000}) {
		t.Fatalf("decoded %+v", got)
	}
}

func TestAClientHostedLLMGetsTheSchemaAndIsShownTheErrorOfAnInvalidAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	var invocations []*pb.LlmInvocation
	llm := func(_ context.Context, inv *pb.LlmInvocation) (*pb.LlmResult, error) {
		invocations = append(invocations, inv)
		if inv.GetIteration() == 1 {
			return &pb.LlmResult{Content: `{"city": "Rome"}`}, nil
		}
		return &pb.LlmResult{Content: `{"city": "Rome", "population": 2800000}`}, nil
	}
	session, err := client.StartSession(ctx, SessionOptions{
		Spec: &pb.RunSpec{Prompt: "Which city?", OutputSchema: cityOutput()},
		LLM:  llm,
	})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, session)
	result, err := session.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got city
	if err := DecodeOutput(result, &got); err != nil {
		t.Fatal(err)
	}
	if got != (city{"Rome", 2800000}) {
		t.Fatalf("decoded %+v", got)
	}
	if len(invocations) != 2 || invocations[0].GetOutputSchema().GetSchema() != citySchema {
		t.Fatalf("the LLM was not sent the schema: %v", invocations)
	}
	last := invocations[1].GetMessages()
	shown := last[len(last)-1]
	if shown.GetRole() != pb.Role_ROLE_USER || !strings.Contains(shown.GetContent(), `"population" is a required property`) {
		t.Fatalf("the second invocation did not show the error: %v", shown)
	}
}

func TestARunPastItsOutputRetriesHasNoOutputToDecode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	retries := int32(0)
	spec := &pb.RunSpec{
		Prompt:           "Which city?",
		Llm:              &pb.LlmSelection{Script: `[{"content": "Lyon"}]`},
		OutputSchema:     cityOutput(),
		MaxOutputRetries: &retries,
	}
	resp, err := client.RPC.RunToolLoop(ctx, &pb.RunToolLoopRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	result := resp.GetResult()
	if result.GetStopReason() != pb.StopReason_STOP_REASON_MAX_OUTPUT_RETRIES || result.GetContent() != "Lyon" {
		t.Fatalf("result %v", result)
	}
	var got city
	if err := DecodeOutput(result, &got); !errors.Is(err, ErrNoOutput) {
		t.Fatalf("DecodeOutput gave %v", err)
	}
}

func TestAHostileOutputSchemaIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	spec := &pb.RunSpec{
		Prompt:       "x",
		Llm:          &pb.LlmSelection{Script: `[{"output": {}}]`},
		OutputSchema: &pb.OutputSchema{Name: "x", Schema: `{"type":"object","properties":{"x":{"$ref":"https://example.com/s.json"}}}`},
	}
	_, err := client.RPC.RunToolLoop(ctx, &pb.RunToolLoopRequest{Spec: spec})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "points outside the schema") {
		t.Fatalf("got %v", err)
	}
}
