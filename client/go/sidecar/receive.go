package sidecar

import (
	"errors"
	"io"
	"strings"
	"time"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// reattachBackoff are the pauses before the attempts to re-attach after a break, the last
// repeated: those of the Python and Node.js clients.
var reattachBackoff = []time.Duration{
	50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second,
}

// errDropped is Wait's error for a session dropped CancelGrace after its context ended,
// its run not over: the events it still held back are not handed out.
var errDropped = status.Error(codes.Canceled, "the session's context ended and its run did not end within "+
	CancelGrace.String()+" (were its events read?): the session dropped its stream")

// open opens a stream whose first message is start (a start, or a re-attach) and makes it
// the current one; it returns the stream and its attach number.
func (s *Session) open(start *pb.SessionStart) (pb.ToolRuntimeService_SessionClient, int, error) {
	stream, err := s.client.RPC.Session(s.ctx)
	if err != nil {
		return nil, 0, err
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.stream, s.halfClosed = stream, false
	s.attached++
	err = stream.Send(&pb.SessionRequest{Kind: &pb.SessionRequest_Start{Start: start}})
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	return stream, s.attached, nil // io.EOF: the stream has ended, and Recv says how
}

// receive reads the session's streams to the run's end: it starts the work the invocations
// ask for, hands the events to Events (waiting for the reader while Events is full), and
// after a break re-attaches when SessionOptions.Reattach says so.
func (s *Session) receive(stream pb.ToolRuntimeService_SessionClient, attach int) {
	r := reading{deltas: newDeltaDedup()}
	var streamErr error
	attempt := 0
	var broken time.Time // when the current break began
	for {
		resp, err := stream.Recv()
		if s.ctx.Err() != nil { // dropped by watch: the run did not end within CancelGrace
			streamErr = errDropped
			break
		}
		if err == nil {
			attempt, broken = 0, time.Time{}
			s.take(resp, attach, &r)
			continue
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if r.terminal != nil { // the run is over: nothing to re-attach to
			break
		}
		if broken.IsZero() {
			broken = time.Now()
		}
		if stream, attach, err = s.reattach(err, &attempt, broken, r.last); stream == nil {
			streamErr = err
			break
		}
		r.deltas.connected()
	}
	s.stop() // ends the calls still running
	s.inflight.Wait()
	s.finish(r.terminal, r.records, streamErr)
}

// reading is what receive has seen of the run so far.
type reading struct {
	terminal *pb.RunEvent
	records  []*pb.ToolCallRecord
	last     uint64 // the newest logged event received: where a re-attach resumes
	deltas   *deltaDedup
}

// take handles one response of stream attach: the events that came before its invocation are
// handed out in order, then the invocation's work starts. So a reader that stops taking
// events holds back the call behind them, whether they came in its message (batch_events) or
// in messages of their own.
func (s *Session) take(resp *pb.SessionResponse, attach int, r *reading) {
	events := resp.GetEvents()
	if ev := resp.GetEvent(); ev != nil {
		events = append(events, ev)
	}
	for _, ev := range events {
		if ev.GetLlmDelta() != nil {
			if ev = r.deltas.admit(ev); ev == nil {
				continue // handed out already, before a re-attach
			}
		} else {
			r.last = ev.GetSequence()
		}
		if rec := ev.GetToolCallCompleted().GetRecord(); rec != nil {
			r.records = append(r.records, rec)
		}
		if ev.GetRunStarted() != nil {
			s.idMu.Lock()
			s.runID = ev.GetRunId()
			s.idMu.Unlock()
		}
		if asked := ev.GetApprovalRequested(); asked != nil && s.opts.Approve != nil {
			s.work("approval:"+asked.GetCallId(), attach, func() *pb.SessionRequest { return s.decide(asked) })
		}
		if isTerminal(ev) {
			r.terminal = ev
			s.halfClose() // nothing more to say: the run is over
		}
		s.deliver(ev) // false: the session was dropped, and the stream's end follows
	}
	if inv := resp.GetToolInvocation(); inv != nil {
		s.work("tool:"+inv.GetCallId(), attach, func() *pb.SessionRequest { return s.invoke(inv) })
	}
	if inv := resp.GetLlmInvocation(); inv != nil && (s.opts.LLM != nil || s.opts.StreamingLLM != nil) {
		s.work("llm:"+inv.GetRequestId(), attach, func() *pb.SessionRequest { return s.answerLLM(inv) })
	}
}

// work starts the work answering key in a goroutine of its own, unless it is under way or
// done already: a stream that asks again (re-attached) is then sent the answer given.
func (s *Session) work(key string, attach int, do func() *pb.SessionRequest) {
	if !s.answers.begin(key, attach, s.sent) {
		return
	}
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		s.answers.finish(key, do(), s.sent)
	}()
}

// reattach opens a stream that re-attaches to the run after the stream ended with err,
// pausing before each attempt; it gives up, returning a nil stream and the error to report,
// when re-attaching cannot help or ReattachTimeout has passed since the break.
func (s *Session) reattach(err error, attempt *int, broken time.Time, last uint64) (pb.ToolRuntimeService_SessionClient, int, error) {
	for {
		wait, ok := s.retryAfter(err, *attempt)
		if !ok || time.Since(broken)+wait > s.opts.ReattachTimeout {
			return nil, 0, err
		}
		*attempt++
		timer := time.NewTimer(wait) // a pause between attempts, not a synchronisation
		select {
		case <-timer.C:
		case <-s.ctx.Done():
			timer.Stop()
			return nil, 0, err
		}
		start := proto.Clone(s.start).(*pb.SessionStart)
		start.ReattachRunId, start.AfterSequence = s.RunID(), last
		stream, attach, oerr := s.open(start)
		if oerr == nil {
			return stream, attach, nil
		}
		err = oerr
	}
}

// retryAfter is the pause before attempt (from 0) to re-attach after a stream ended with
// err, and whether re-attaching can help: the connection was lost, or the sidecar has not
// noticed yet that the old stream is gone.
func (s *Session) retryAfter(err error, attempt int) (time.Duration, bool) {
	if !s.opts.Reattach || s.RunID() == "" || s.leaving.Load() || s.ctx.Err() != nil {
		return 0, false // not asked for, no run seen yet, or the session is being given up
	}
	st := status.Convert(err)
	lost := st.Code() == codes.Unavailable || st.Code() == codes.Canceled
	held := st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), "not waiting")
	if !lost && !held {
		return 0, false
	}
	if attempt >= len(reattachBackoff) {
		attempt = len(reattachBackoff) - 1
	}
	return reattachBackoff[attempt], true
}
