package sidecar

import (
	"context"
	"errors"
	"fmt"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
)

// LLMFunc answers one LLM invocation of a Session whose LLM this process hosts: the whole
// conversation so far is in request.Messages, the tools the model may call in request.Tools,
// and the run's output schema, if it has one, in request.OutputSchema (a final answer, one
// without tool calls, must then be Content as JSON text matching it: the sidecar validates it
// and sends an invalid one back as a user message naming the error). Return the model's answer
// (RequestId is filled in); an error fails the run with its message. ctx ends at the
// sidecar's deadline for the answer or when the session ends.
type LLMFunc func(ctx context.Context, request *pb.LlmInvocation) (*pb.LlmResult, error)

// answerLLM asks the LLM function and returns the message with its answer.
func (s *Session) answerLLM(inv *pb.LlmInvocation) *pb.SessionRequest {
	ctx := s.ctx
	if deadline := inv.GetDeadline(); deadline != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.AsTime())
		defer cancel()
	}
	result, err := s.askLLM(ctx, inv)
	if err != nil {
		message := err.Error()
		result = &pb.LlmResult{Error: &message}
	}
	result.RequestId = inv.GetRequestId()
	return &pb.SessionRequest{Kind: &pb.SessionRequest_LlmResult{LlmResult: result}}
}

func (s *Session) askLLM(ctx context.Context, inv *pb.LlmInvocation) (result *pb.LlmResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the LLM function panicked: %v", r)
		}
	}()
	result, err = s.opts.LLM(ctx, inv)
	if err == nil && result == nil {
		err = errors.New("the LLM function returned no answer")
	}
	return result, err
}
