package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ToolFunc runs one call of a Go tool. input is the call's JSON object; the value returned is
// sent back as JSON (a value that is not a JSON object is wrapped as {"result": value}, as the
// other clients do), and an error becomes a failed call whose message the model sees. ctx ends
// when the sidecar's deadline for the call passes or the session ends, and a ToolFunc should
// return then: Session.Wait returns only once every call it started has returned.
type ToolFunc func(ctx context.Context, input json.RawMessage) (any, error)

// Tool is a Go function the sidecar may call during a Session.
type Tool struct {
	Name        string
	Description string
	// InputSchema is JSON Schema text for the input; empty accepts any object.
	InputSchema string
	// SideEffects marks a tool whose calls an automation profile may hold for approval.
	SideEffects bool
	// Timeout bounds each call; zero takes the sidecar's default.
	Timeout time.Duration
	Func    ToolFunc
}

// ApprovalFunc decides an approval_requested event of the session's run: approve or deny,
// with a reason the model sees when denied. An error denies the call, saying why.
type ApprovalFunc func(ctx context.Context, request *pb.ApprovalRequested) (approved bool, reason string, err error)

// SessionOptions describes a Session run.
type SessionOptions struct {
	// Spec is what to run: the prompt, the LLM selection (a script for the scripted profile),
	// limits and context.
	Spec *pb.RunSpec
	// Tools are this process's tools; the sidecar's own stay available as Spec.ToolNames says
	// (empty: all of them), or none with Spec.NoServerTools. A tool named like one of the
	// sidecar's is refused only when the run offers that one of the sidecar's.
	Tools []Tool
	// LLM, when set, makes this process the run's LLM (client_llm): the sidecar sends it each
	// LLM invocation, with the whole conversation, and waits for its answer.
	LLM LLMFunc
	// StreamingLLM, when set instead of LLM, makes this process the run's LLM and streams each
	// answer's pieces to the sidecar before it (see StreamingLLMFunc).
	StreamingLLM StreamingLLMFunc
	// Approve, when set, decides the run's approval requests (handles_approvals); otherwise
	// they wait for the DecideApproval RPC or time out.
	Approve ApprovalFunc
	// EventBuffer is how many events Events holds that nobody has read yet; zero takes
	// DefaultEventBuffer. No event is ever dropped: when Events is full the session waits for
	// its reader and reads no more of the stream meanwhile, so the run waits too (gRPC flow
	// control holds the sidecar back, and a tool call whose deadline passes meanwhile times
	// out). Read Events to its end, or set DiscardEvents.
	EventBuffer int
	// DiscardEvents hands out no events: Events is closed at once, and the session never
	// waits for a reader. For a caller that wants only Wait's result.
	DiscardEvents bool
	// StreamDeltas also hands out the model's answer as it streams: llm_delta events, whose
	// sequence is 0, before the llm_responded event that supersedes them (see pb.LlmDelta).
	StreamDeltas bool
	// Reattach opens a stream that breaks (the connection dropped, the sidecar restarted)
	// again and re-attaches it to the run after the last event received, trying for up to
	// ReattachTimeout from the break: the same tools serve the run, a call still running goes
	// on, and one answered already is answered again, not run twice. The run waits for this
	// as long as the sidecar's session_reattach_s.
	Reattach bool
	// ReattachTimeout bounds the attempts after each break; zero takes DefaultReattachTimeout.
	ReattachTimeout time.Duration
}

// DefaultEventBuffer is SessionOptions.EventBuffer's default.
const DefaultEventBuffer = 1024

// DefaultReattachTimeout is SessionOptions.ReattachTimeout's default.
const DefaultReattachTimeout = 60 * time.Second

// RunFailedError is a run that ended with run_failed: Code is the failure's gRPC status code
// (codes.Unavailable when the LLM failed, say), Result the partial result. It is a gRPC status
// error too: status.Code(err) is Code, and status.FromError(err) gives Code and Message.
type RunFailedError struct {
	Code    codes.Code
	Message string
	Result  *pb.ToolCallRunResult
}

func (e *RunFailedError) Error() string {
	return fmt.Sprintf("run failed (%s): %s", e.Code, e.Message)
}

// GRPCStatus is the failure as a gRPC status, for status.Code and status.FromError.
func (e *RunFailedError) GRPCStatus() *status.Status {
	return status.New(e.Code, e.Message)
}

// Session is one Session run: the sidecar calls this process's tools over one bidirectional
// stream (a new one after each re-attach). Its tool calls and approvals are answered as they
// come; its events wait in Events, up to SessionOptions.EventBuffer, for their reader.
type Session struct {
	client *Client
	start  *pb.SessionStart
	tools  map[string]Tool
	opts   SessionOptions
	ctx    context.Context // ends with the session: cancels tool calls still running
	stop   context.CancelFunc

	sendMu     sync.Mutex
	stream     pb.ToolRuntimeService_SessionClient // the current stream
	attached   int                                 // how many streams were opened: the current one's number
	halfClosed bool

	idMu  sync.Mutex
	runID string

	events  chan *pb.RunEvent // receive its only sender
	answers *answers
	leaving atomic.Bool // the caller's context ended: the run is being cancelled, not re-attached

	done     chan struct{}
	inflight sync.WaitGroup
	result   *pb.ToolCallRunResult
	err      error
}

// CancelGrace is how long a Session whose context has ended waits for the sidecar to confirm
// the cancellation with run_cancelled before it drops the stream.
const CancelGrace = 5 * time.Second

// StartSession opens a Session run. Cancelling ctx cancels the run: the session sends
// SessionCancel, and drops the stream if the run has not ended within CancelGrace (say, its
// events are not being read). No goroutine of the session outlives the run.
func (c *Client) StartSession(ctx context.Context, opts SessionOptions) (*Session, error) {
	if opts.Spec == nil {
		return nil, errors.New("SessionOptions.Spec is required")
	}
	if opts.LLM != nil && opts.StreamingLLM != nil {
		return nil, errors.New("set SessionOptions.LLM or StreamingLLM, not both")
	}
	// BatchEvents: receive unpacks SessionResponse.events, so the events that precede an
	// invocation come in its message, one message an iteration instead of one an event.
	start := &pb.SessionStart{
		Spec: opts.Spec, HandlesApprovals: opts.Approve != nil,
		ClientLlm:    opts.LLM != nil || opts.StreamingLLM != nil,
		StreamDeltas: opts.StreamDeltas, BatchEvents: true,
	}
	tools := make(map[string]Tool, len(opts.Tools))
	for _, tool := range opts.Tools {
		if tool.Name == "" || tool.Func == nil {
			return nil, errors.New("every Tool needs a Name and a Func")
		}
		if _, dup := tools[tool.Name]; dup {
			return nil, fmt.Errorf("two tools are named %q", tool.Name)
		}
		tools[tool.Name] = tool
		spec := &pb.ToolSpec{Name: tool.Name, Description: tool.Description, InputSchema: tool.InputSchema, SideEffects: tool.SideEffects}
		if tool.Timeout > 0 {
			spec.Timeout = durationpb.New(tool.Timeout)
		}
		start.Tools = append(start.Tools, spec)
	}
	// The stream outlives ctx by the cancellation's grace, so it has a context of its own.
	sessionCtx, stop := context.WithCancel(context.Background())
	buffer := opts.EventBuffer
	if buffer <= 0 {
		buffer = DefaultEventBuffer
	}
	if opts.ReattachTimeout <= 0 {
		opts.ReattachTimeout = DefaultReattachTimeout
	}
	s := &Session{
		client: c, start: start, tools: tools, opts: opts, ctx: sessionCtx, stop: stop,
		events: make(chan *pb.RunEvent, buffer), answers: newAnswers(), done: make(chan struct{}),
	}
	if opts.DiscardEvents {
		close(s.events)
	}
	stream, attach, err := s.open(start)
	if err != nil {
		stop()
		return nil, err
	}
	go s.receive(stream, attach)
	go s.watch(ctx)
	return s, nil
}

// Events are the run's events in order; the channel is closed after the last one (at once
// with SessionOptions.DiscardEvents). None is dropped: while the channel is full the session
// waits for its reader, and the run with it. Only a session given up on is closed early: its
// context ended and its run did not end within CancelGrace (Wait then says so).
func (s *Session) Events() <-chan *pb.RunEvent { return s.events }

// DroppedEvents is always 0: a session drops no events (see SessionOptions.EventBuffer).
//
// Deprecated: it counted the events dropped when Events was full; they are no longer
// dropped. It goes in the next release.
func (s *Session) DroppedEvents() int64 { return 0 }

// RunID is the run's id, known once its run_started event has arrived ("" before).
func (s *Session) RunID() string {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	return s.runID
}

// Cancel asks the sidecar to cancel the run; it ends with run_cancelled carrying reason.
func (s *Session) Cancel(reason string) error {
	_, err := s.send(&pb.SessionRequest{Kind: &pb.SessionRequest_Cancel{Cancel: &pb.SessionCancel{Reason: reason}}})
	return err
}

// Wait blocks until the run has ended, or ctx has, and returns the run's result: for
// run_completed and run_cancelled (see StopReason) a nil error, for run_failed a
// *RunFailedError, and the stream's status error when it ended without a terminal event.
// When ctx ends first it returns ctx.Err() and the run goes on (cancel it with the context
// given to StartSession, or Cancel). Unless DiscardEvents is set, the run ends only while
// someone reads Events.
func (s *Session) Wait(ctx context.Context) (*pb.ToolCallRunResult, error) {
	select {
	case <-s.done:
		return s.result, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Done is closed when the run has ended and Wait returns at once.
func (s *Session) Done() <-chan struct{} { return s.done }

var errSessionEnded = errors.New("the session's run has ended")

// send writes req on the current stream, and says which that is (its attach number).
func (s *Session) send(req *pb.SessionRequest) (int, error) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.halfClosed {
		return s.attached, errSessionEnded
	}
	return s.attached, s.stream.Send(req)
}

// sent is send for an answer: a failed send needs nothing more, since the stream's end
// says why, and a re-attached stream asks again for what is still owed.
func (s *Session) sent(req *pb.SessionRequest) int {
	attach, _ := s.send(req)
	return attach
}

func (s *Session) halfClose() {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if !s.halfClosed {
		s.halfClosed = true
		_ = s.stream.CloseSend()
	}
}

func (s *Session) finish(terminal *pb.RunEvent, records []*pb.ToolCallRecord, streamErr error) {
	if terminal != nil {
		result := terminalResult(terminal)
		if result.GetHistoryOmitted() {
			result.ToolCallHistory = records // too large for one message: the records seen
		}
		s.result = result
		if failed := terminal.GetRunFailed(); failed != nil {
			s.err = &RunFailedError{Code: codes.Code(failed.GetCode()), Message: failed.GetMessage(), Result: result}
		}
	} else if streamErr != nil {
		s.err = streamErr
	} else {
		s.err = errors.New("the session ended without a terminal event")
	}
	close(s.done)
	if !s.opts.DiscardEvents {
		close(s.events) // after done: a reader seeing the end finds Wait's answer ready
	}
}

// deliver hands ev to Events, waiting for the reader while Events is full; false when the
// session was dropped meanwhile (CancelGrace passed after its context ended).
func (s *Session) deliver(ev *pb.RunEvent) bool {
	if s.opts.DiscardEvents {
		return true
	}
	select {
	case s.events <- ev:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// watch turns the end of ctx into a cancellation of the run.
func (s *Session) watch(ctx context.Context) {
	select {
	case <-s.done:
		return
	case <-ctx.Done():
	}
	s.leaving.Store(true)
	_ = s.Cancel(fmt.Sprintf("the client's context ended: %v", ctx.Err()))
	timer := time.NewTimer(CancelGrace)
	defer timer.Stop()
	select {
	case <-s.done:
	case <-timer.C:
		s.stop() // the sidecar cancels the run of a dropped stream
	}
}

// invoke runs the tool inv names and returns the message answering it.
func (s *Session) invoke(inv *pb.ToolInvocation) *pb.SessionRequest {
	ctx := s.ctx
	if deadline := inv.GetDeadline(); deadline != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.AsTime())
		defer cancel()
	}
	result := &pb.ToolResult{CallId: inv.GetCallId()}
	output, err := s.call(ctx, inv)
	if err != nil {
		result.Outcome = &pb.ToolResult_Error{Error: err.Error()}
	} else {
		result.Outcome = &pb.ToolResult_Output{Output: output}
	}
	return &pb.SessionRequest{Kind: &pb.SessionRequest_ToolResult{ToolResult: result}}
}

func (s *Session) call(ctx context.Context, inv *pb.ToolInvocation) (output string, err error) {
	tool, ok := s.tools[inv.GetToolName()]
	if !ok {
		return "", fmt.Errorf("this client hosts no tool named %s", inv.GetToolName())
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("tool %s panicked: %v", tool.Name, r)
		}
	}()
	value, err := tool.Func(ctx, json.RawMessage(inv.GetInputs()))
	if err != nil {
		return "", err
	}
	return encodeOutput(value)
}

// encodeOutput is a tool's value as JSON object text: {"result": value} for any other JSON.
func encodeOutput(value any) (string, error) {
	data, ok := value.(json.RawMessage)
	if !ok {
		var err error
		if data, err = json.Marshal(value); err != nil {
			return "", fmt.Errorf("the tool's result is not JSON: %w", err)
		}
	}
	var object map[string]json.RawMessage
	if json.Unmarshal(data, &object) == nil && object != nil {
		return string(data), nil
	}
	wrapped, err := json.Marshal(map[string]json.RawMessage{"result": data})
	if err != nil {
		return "", fmt.Errorf("the tool's result is not JSON: %w", err)
	}
	return string(wrapped), nil
}

// decide asks Approve about asked and returns the message with its decision.
func (s *Session) decide(asked *pb.ApprovalRequested) *pb.SessionRequest {
	decision := &pb.ApprovalDecision{CallId: asked.GetCallId()}
	approved, reason, err := s.opts.Approve(s.ctx, asked)
	if err != nil {
		decision.Reason = fmt.Sprintf("the approver failed: %v", err)
	} else {
		decision.Approved, decision.Reason = approved, reason
	}
	return &pb.SessionRequest{Kind: &pb.SessionRequest_ApprovalDecision{ApprovalDecision: decision}}
}

func isTerminal(ev *pb.RunEvent) bool {
	return ev.GetRunCompleted() != nil || ev.GetRunFailed() != nil || ev.GetRunCancelled() != nil
}

func terminalResult(ev *pb.RunEvent) *pb.ToolCallRunResult {
	switch {
	case ev.GetRunCompleted() != nil:
		return ev.GetRunCompleted().GetResult()
	case ev.GetRunFailed() != nil:
		return ev.GetRunFailed().GetResult()
	default:
		return ev.GetRunCancelled().GetResult()
	}
}
