package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
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
	// Approve, when set, decides the run's approval requests (handles_approvals); otherwise
	// they wait for the DecideApproval RPC or time out.
	Approve ApprovalFunc
	// EventBuffer is how many events Events holds that nobody has read yet; zero takes
	// DefaultEventBuffer. When it is full the oldest unread event is dropped (and counted by
	// DroppedEvents), so a session whose Events is read slowly or never holds at most this
	// many events, while its calls, approvals and Wait's result are unaffected.
	EventBuffer int
}

// DefaultEventBuffer is SessionOptions.EventBuffer's default: a session's unread events beyond
// it are dropped, oldest first.
const DefaultEventBuffer = 1024

// RunFailedError is a run that ended with run_failed; Result is its partial result.
type RunFailedError struct {
	Code    int32
	Message string
	Result  *pb.ToolCallRunResult
}

func (e *RunFailedError) Error() string {
	return fmt.Sprintf("run failed (code %d): %s", e.Code, e.Message)
}

// Session is one Session run: the sidecar calls this process's tools over one bidirectional
// stream. Its tool calls and approvals are answered as they come, whether or not Events is read:
// unread events are held up to SessionOptions.EventBuffer, the oldest dropped beyond it.
type Session struct {
	stream pb.ToolRuntimeService_SessionClient
	tools  map[string]Tool
	opts   SessionOptions
	ctx    context.Context // ends with the stream: cancels tool calls still running
	stop   context.CancelFunc

	sendMu     sync.Mutex
	halfClosed bool

	idMu    sync.Mutex
	events  chan *pb.RunEvent // buffered: the unread events, receive its only sender
	dropped atomic.Int64

	done     chan struct{}
	inflight sync.WaitGroup
	runID    string
	result   *pb.ToolCallRunResult
	err      error
}

// CancelGrace is how long a Session whose context has ended waits for the sidecar to confirm
// the cancellation with run_cancelled before it drops the stream.
const CancelGrace = 5 * time.Second

// StartSession opens a Session run. Cancelling ctx cancels the run: the session sends
// SessionCancel, and drops the stream if the sidecar has not ended the run within CancelGrace.
// No goroutine of the session outlives the run, whether or not Events is read or ctx ends.
func (c *Client) StartSession(ctx context.Context, opts SessionOptions) (*Session, error) {
	if opts.Spec == nil {
		return nil, errors.New("SessionOptions.Spec is required")
	}
	start := &pb.SessionStart{Spec: opts.Spec, HandlesApprovals: opts.Approve != nil, ClientLlm: opts.LLM != nil}
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
	streamCtx, stop := context.WithCancel(context.Background())
	stream, err := c.RPC.Session(streamCtx)
	if err != nil {
		stop()
		return nil, err
	}
	buffer := opts.EventBuffer
	if buffer <= 0 {
		buffer = DefaultEventBuffer
	}
	s := &Session{
		stream: stream, tools: tools, opts: opts, ctx: streamCtx, stop: stop,
		events: make(chan *pb.RunEvent, buffer), done: make(chan struct{}),
	}
	if err := s.send(&pb.SessionRequest{Kind: &pb.SessionRequest_Start{Start: start}}); err != nil {
		stop()
		return nil, err
	}
	go s.receive()
	go s.watch(ctx)
	return s, nil
}

// Events are the run's events in order; the channel is closed after the last one. Beyond
// SessionOptions.EventBuffer unread events the oldest are dropped: the terminal event is
// always the last one left.
func (s *Session) Events() <-chan *pb.RunEvent { return s.events }

// DroppedEvents is how many events were dropped unread because Events held
// SessionOptions.EventBuffer events already.
func (s *Session) DroppedEvents() int64 { return s.dropped.Load() }

// RunID is the run's id, known once its run_started event has arrived ("" before).
func (s *Session) RunID() string {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	return s.runID
}

// Cancel asks the sidecar to cancel the run; it ends with run_cancelled carrying reason.
func (s *Session) Cancel(reason string) error {
	return s.send(&pb.SessionRequest{Kind: &pb.SessionRequest_Cancel{Cancel: &pb.SessionCancel{Reason: reason}}})
}

// Wait blocks until the run has ended and returns its result: for run_completed and
// run_cancelled (see StopReason) a nil error, for run_failed a *RunFailedError, and the
// stream's status error when it ended without a terminal event.
func (s *Session) Wait() (*pb.ToolCallRunResult, error) {
	<-s.done
	return s.result, s.err
}

// Done is closed when the run has ended and Wait returns at once.
func (s *Session) Done() <-chan struct{} { return s.done }

func (s *Session) send(req *pb.SessionRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.halfClosed {
		return errors.New("the session's run has ended")
	}
	return s.stream.Send(req)
}

func (s *Session) halfClose() {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if !s.halfClosed {
		s.halfClosed = true
		_ = s.stream.CloseSend()
	}
}

// receive reads the stream to its end, queueing events and answering invocations.
func (s *Session) receive() {
	var terminal *pb.RunEvent
	var records []*pb.ToolCallRecord
	var streamErr error
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				streamErr = err
			}
			break
		}
		events := resp.GetEvents()
		if ev := resp.GetEvent(); ev != nil {
			events = append(events, ev)
		}
		for _, ev := range events {
			if rec := ev.GetToolCallCompleted().GetRecord(); rec != nil {
				records = append(records, rec)
			}
			if ev.GetRunStarted() != nil {
				s.idMu.Lock()
				s.runID = ev.GetRunId()
				s.idMu.Unlock()
			}
			if asked := ev.GetApprovalRequested(); asked != nil && s.opts.Approve != nil {
				s.inflight.Add(1)
				go s.decide(asked)
			}
			if isTerminal(ev) {
				terminal = ev
				s.halfClose() // nothing more to say: the run is over
			}
			s.push(ev)
		}
		if inv := resp.GetToolInvocation(); inv != nil {
			s.inflight.Add(1)
			go s.invoke(inv)
		}
		if inv := resp.GetLlmInvocation(); inv != nil && s.opts.LLM != nil {
			s.inflight.Add(1)
			go s.answerLLM(inv)
		}
	}
	s.stop() // ends the calls still running
	s.inflight.Wait()
	s.finish(terminal, records, streamErr)
}

func (s *Session) finish(terminal *pb.RunEvent, records []*pb.ToolCallRecord, streamErr error) {
	if terminal != nil {
		result := terminalResult(terminal)
		if result.GetHistoryOmitted() {
			result.ToolCallHistory = records // too large for one message: the records seen
		}
		s.result = result
		if failed := terminal.GetRunFailed(); failed != nil {
			s.err = &RunFailedError{Code: failed.GetCode(), Message: failed.GetMessage(), Result: result}
		}
	} else if streamErr != nil {
		s.err = streamErr
	} else {
		s.err = errors.New("the session ended without a terminal event")
	}
	close(s.done)
	close(s.events) // after done: a reader seeing the end finds Wait's answer ready
}

// push hands ev to Events without waiting for a reader: when Events is full, the oldest
// unread event makes room (receive is the only sender, so the second try succeeds).
func (s *Session) push(ev *pb.RunEvent) {
	for {
		select {
		case s.events <- ev:
			return
		default:
		}
		select {
		case <-s.events:
			s.dropped.Add(1)
		default: // a reader took one meanwhile
		}
	}
}

// watch turns the end of ctx into a cancellation of the run.
func (s *Session) watch(ctx context.Context) {
	select {
	case <-s.done:
		return
	case <-ctx.Done():
	}
	_ = s.Cancel(fmt.Sprintf("the client's context ended: %v", ctx.Err()))
	timer := time.NewTimer(CancelGrace)
	defer timer.Stop()
	select {
	case <-s.done:
	case <-timer.C:
		s.stop() // the sidecar cancels the run of a dropped stream
	}
}

func (s *Session) invoke(inv *pb.ToolInvocation) {
	defer s.inflight.Done()
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
	_ = s.send(&pb.SessionRequest{Kind: &pb.SessionRequest_ToolResult{ToolResult: result}})
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

func (s *Session) decide(asked *pb.ApprovalRequested) {
	defer s.inflight.Done()
	decision := &pb.ApprovalDecision{CallId: asked.GetCallId()}
	approved, reason, err := s.opts.Approve(s.ctx, asked)
	if err != nil {
		decision.Reason = fmt.Sprintf("the approver failed: %v", err)
	} else {
		decision.Approved, decision.Reason = approved, reason
	}
	_ = s.send(&pb.SessionRequest{Kind: &pb.SessionRequest_ApprovalDecision{ApprovalDecision: decision}})
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
