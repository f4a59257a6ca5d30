package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// WatchOptions tunes Client.Watch.
type WatchOptions struct {
	// AfterSequence skips the events up to and including this sequence number (0: all).
	AfterSequence uint64
	// WindowBytes asks for at most this many unacknowledged bytes in flight (0: the sidecar's).
	WindowBytes uint64
	// NoResume returns the sidecar's RESOURCE_EXHAUSTED (a watcher that fell behind is
	// dropped) instead of reconnecting after the last event returned.
	NoResume bool
	// StreamDeltas also returns the model's answer as it streams: llm_delta events, whose
	// sequence is 0, before the llm_responded event that supersedes them (a preview: replace
	// the streamed text with its content). After a reconnection the sidecar sends the current
	// call's deltas again; Next trims them to what it has not returned, so each piece comes
	// once and Index runs on without a gap. After a reconnection past a call's end its deltas
	// may not come.
	StreamDeltas bool
}

// Watcher follows a run with FollowRun: call Next until it returns io.EOF after the run's
// terminal event. An event counts as handled once Next is called again, and acknowledgements
// follow that rule: the sidecar keeps no more than its window in flight beyond it.
type Watcher struct {
	client  *Client
	ctx     context.Context
	cancel  context.CancelFunc
	runID   string
	opts    WatchOptions
	stream  pb.ToolRuntimeService_FollowRunClient
	pending []*pb.RunEvent
	// ackDue: the message the pending events came in asked for an acknowledgement.
	ackDue    bool
	last      uint64 // the newest logged event Next returned: where a reconnection resumes
	fruitless int    // reconnections in a row that brought no event
	done      bool
	deltas    *deltaDedup
}

// maxFruitless bounds the reconnections in a row that bring no event before Next gives up.
const maxFruitless = 6

// Watch follows runID's events: those after opts.AfterSequence (replayed), then live ones
// until the run ends. Cancel ctx, or call Close, to stop early.
func (c *Client) Watch(ctx context.Context, runID string, opts WatchOptions) (*Watcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &Watcher{client: c, ctx: ctx, cancel: cancel, runID: runID, opts: opts, last: opts.AfterSequence, deltas: newDeltaDedup()}
	if err := w.open(); err != nil {
		cancel()
		return nil, err
	}
	return w, nil
}

func (w *Watcher) open() error {
	stream, err := w.client.RPC.FollowRun(w.ctx)
	if err != nil {
		return err
	}
	start := &pb.FollowRunStart{RunId: w.runID, AfterSequence: w.last, WindowBytes: w.opts.WindowBytes, StreamDeltas: w.opts.StreamDeltas}
	if err := stream.Send(&pb.FollowRunRequest{Kind: &pb.FollowRunRequest_Start{Start: start}}); err != nil {
		return err
	}
	w.stream = stream
	w.deltas.connected()
	return nil
}

// Next returns the run's next event, io.EOF after the terminal one, or the error that ended
// the stream (a gRPC status error: NOT_FOUND for a run this caller may not see).
func (w *Watcher) Next() (*pb.RunEvent, error) {
	for {
		ev, err := w.receive()
		if err != nil {
			return nil, err
		}
		if ev.GetLlmDelta() == nil {
			w.last = ev.GetSequence()
			return ev, nil
		}
		if ev = w.deltas.admit(ev); ev != nil {
			return ev, nil
		}
		// Returned already, before a reconnection: on to the next.
	}
}

// receive is the next event the stream brings, reconnecting when the sidecar drops it.
func (w *Watcher) receive() (*pb.RunEvent, error) {
	for len(w.pending) == 0 {
		if w.done {
			return nil, io.EOF
		}
		// Everything handed out so far is handled: acknowledge it if the sidecar asked.
		if err := w.acknowledge(); err != nil {
			return nil, err
		}
		resp, err := w.stream.Recv()
		if errors.Is(err, io.EOF) {
			w.done = true
			w.cancel()
			return nil, io.EOF
		}
		if err != nil {
			if resumed, rerr := w.resume(err); !resumed {
				return nil, rerr
			}
			continue
		}
		w.pending = resp.GetEvents()
		w.ackDue = resp.GetAckRequested()
		if len(w.pending) > 0 {
			w.fruitless = 0
		}
	}
	ev := w.pending[0]
	w.pending = w.pending[1:]
	return ev, nil
}

func (w *Watcher) acknowledge() error {
	if !w.ackDue {
		return nil
	}
	w.ackDue = false
	ack := &pb.FollowRunRequest{Kind: &pb.FollowRunRequest_Ack{Ack: &pb.FollowRunAck{Sequence: w.last}}}
	if err := w.stream.Send(ack); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil // io.EOF: the stream has ended, and Recv says how
}

// resume reconnects after a drop for falling behind (RESOURCE_EXHAUSTED), backing off when
// the last attempt brought nothing; any other error ends the watch.
func (w *Watcher) resume(err error) (bool, error) {
	if w.opts.NoResume || status.Code(err) != codes.ResourceExhausted || w.fruitless >= maxFruitless {
		w.cancel()
		return false, fmt.Errorf("follow run %s after sequence %d: %w", w.runID, w.last, err)
	}
	w.fruitless++
	select {
	case <-time.After(time.Duration(10<<w.fruitless) * time.Millisecond):
	case <-w.ctx.Done():
		return false, w.ctx.Err()
	}
	if oerr := w.open(); oerr != nil {
		w.cancel()
		return false, oerr
	}
	return true, nil
}

// LastSequence is the sequence number of the newest logged event Next returned (deltas have
// none): the AfterSequence to watch again from.
func (w *Watcher) LastSequence() uint64 { return w.last }

// Close stops following; the run itself goes on.
func (w *Watcher) Close() {
	w.cancel()
}
