package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sync"

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

// StreamingLLMFunc answers like LLMFunc while its model streams: it passes each piece of the
// answer to send as it comes (Text, or a tool call's ToolCallIndex with its ToolCallId and
// ToolName on its first piece and fragments of its Arguments JSON text), and the sidecar relays
// them to the run's watchers that asked for deltas. The session numbers each piece and names
// the request; send keeps the delta it is given (do not change it after), returns at once
// unless a message's worth are waiting to be written, and returns the error of a write that
// failed. The answer returned is sent after every piece, and must hold the whole answer.
type StreamingLLMFunc func(ctx context.Context, request *pb.LlmInvocation, send func(*pb.LlmResultDelta) error) (*pb.LlmResult, error)

// MaxDeltasPerMessage is the most pieces of a streamed answer one message carries: those a
// StreamingLLMFunc sends while the last message is being written go together in the next, to a
// sidecar that takes them so (LlmInvocation.AcceptsDeltaBatches); each goes alone to another.
const MaxDeltasPerMessage = 256

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
	var writer *deltaWriter
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the LLM function panicked: %v", r)
		}
		if writer != nil { // every piece is written before the answer
			if failed := writer.flush(); err == nil && failed != nil {
				err = fmt.Errorf("a streamed piece of the answer could not be sent: %w", failed)
			}
		}
	}()
	if s.opts.StreamingLLM != nil {
		most := 1
		if inv.GetAcceptsDeltaBatches() {
			most = MaxDeltasPerMessage
		}
		send := func(req *pb.SessionRequest) error {
			_, err := s.send(req)
			return err
		}
		writer = newDeltaWriter(send, inv.GetRequestId(), most)
		result, err = s.opts.StreamingLLM(ctx, inv, writer.add)
	} else {
		result, err = s.opts.LLM(ctx, inv)
	}
	if err == nil && result == nil {
		err = errors.New("the LLM function returned no answer")
	}
	return result, err
}

// deltaWriter writes one streamed answer's pieces in order, one message in flight at a time:
// the pieces added meanwhile go together in the next (up to most), and add waits only when
// most are waiting already.
type deltaWriter struct {
	send      func(*pb.SessionRequest) error
	requestID string
	most      int

	mu      sync.Mutex
	changed *sync.Cond // a write ended, or the writer stopped
	pending []*pb.LlmResultDelta
	next    uint32 // the index of the next piece added
	writing bool
	err     error
}

func newDeltaWriter(send func(*pb.SessionRequest) error, requestID string, most int) *deltaWriter {
	w := &deltaWriter{send: send, requestID: requestID, most: most}
	w.changed = sync.NewCond(&w.mu)
	return w
}

func (w *deltaWriter) add(delta *pb.LlmResultDelta) error {
	if delta == nil {
		return errors.New("a nil delta")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && len(w.pending) >= w.most {
		w.changed.Wait()
	}
	if w.err != nil {
		return w.err
	}
	delta.RequestId, delta.Index = w.requestID, w.next
	w.next++
	w.pending = append(w.pending, delta)
	if !w.writing {
		w.writing = true
		go w.write()
	}
	return nil
}

func (w *deltaWriter) write() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.pending) > 0 && w.err == nil {
		n := len(w.pending)
		if n > w.most {
			n = w.most
		}
		batch := w.pending[:n:n]
		w.pending = append([]*pb.LlmResultDelta(nil), w.pending[n:]...)
		w.changed.Broadcast() // room for more behind this write
		w.mu.Unlock()
		request := &pb.SessionRequest{Kind: &pb.SessionRequest_LlmDelta{LlmDelta: batch[0]}}
		if n > 1 {
			request = &pb.SessionRequest{Kind: &pb.SessionRequest_LlmDeltas{LlmDeltas: &pb.LlmResultDeltas{Deltas: batch}}}
		}
		err := w.send(request)
		w.mu.Lock()
		if err != nil {
			w.err = err
		}
		w.changed.Broadcast()
	}
	w.writing = false
	w.changed.Broadcast()
}

// flush waits until every piece added is written; the error of a write that failed.
func (w *deltaWriter) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.writing {
		w.changed.Wait()
	}
	return w.err
}
