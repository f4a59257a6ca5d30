package sidecar

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/oauth"
	"google.golang.org/grpc/status"
)

// testWait bounds every wait of these tests: generous, for a loaded two-core machine.
const testWait = 60 * time.Second

// sidecarBin is the repository's sidecar: $SIDECAR_BIN (make go-test sets it), else .venv's.
func sidecarBin(t *testing.T) string {
	if bin := os.Getenv("SIDECAR_BIN"); bin != "" {
		return bin
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if real, err := filepath.EvalSymlinks(wd); err == nil {
		wd = real
	}
	return filepath.Join(wd, "..", "..", "..", ".venv", "bin", "cleveragents-sidecar")
}

// startSidecar runs `cleveragents-sidecar serve` (on a free loopback port unless args say
// --listen) until the test ends, and returns the address it printed.
func startSidecar(t *testing.T, env []string, args ...string) string {
	t.Helper()
	bin := sidecarBin(t)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run make install at the repository root first", bin)
	}
	listen := []string{"--listen", "127.0.0.1:0"}
	for _, arg := range args {
		if arg == "--listen" {
			listen = nil
		}
	}
	cmd := exec.Command(bin, append(append([]string{"serve", "--log-level", "warning"}, listen...), args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-lines:
		const prefix = "cleveragents-sidecar listening on "
		if !strings.HasPrefix(line, prefix) {
			t.Fatalf("unexpected first line from the sidecar %q; stderr:\n%s", line, stderr.String())
		}
		return strings.TrimPrefix(line, prefix)
	case <-time.After(testWait):
		t.Fatalf("the sidecar did not start in %s; stderr:\n%s", testWait, stderr.String())
	}
	return ""
}

func dial(t *testing.T, ctx context.Context, address string, opts ...Option) *Client {
	t.Helper()
	client, err := Dial(ctx, address, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	if err := client.WaitForReady(ctx); err != nil {
		t.Fatal(err)
	}
	return client
}

type scriptCall struct {
	ID        string         `json:"id"`
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

type scriptTurn struct {
	Content   string       `json:"content"`
	ToolCalls []scriptCall `json:"tool_calls,omitempty"`
}

func scriptedSpec(t *testing.T, turns ...scriptTurn) *pb.RunSpec {
	t.Helper()
	script, err := json.Marshal(turns)
	if err != nil {
		t.Fatal(err)
	}
	return &pb.RunSpec{Prompt: "test", Llm: &pb.LlmSelection{Script: string(script)}}
}

func collect(t *testing.T, s *Session) []*pb.RunEvent {
	t.Helper()
	var events []*pb.RunEvent
	timeout := time.After(testWait)
	for {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				return events
			}
			events = append(events, ev)
		case <-timeout:
			t.Fatalf("the session's events did not end in %s", testWait)
		}
	}
}

func TestSessionCallsGoToolsAndReturnsTheResult(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	upper := Tool{
		Name: "upper", Description: "Upper-cases text.",
		InputSchema: `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`,
		Func: func(_ context.Context, input json.RawMessage) (any, error) {
			var in struct{ Text string }
			if err := json.Unmarshal(input, &in); err != nil {
				return nil, err
			}
			return strings.ToUpper(in.Text), nil
		},
	}
	broken := Tool{Name: "broken", Func: func(context.Context, json.RawMessage) (any, error) {
		return nil, errors.New("out of order")
	}}
	spec := scriptedSpec(t,
		scriptTurn{Content: "calling", ToolCalls: []scriptCall{
			{ID: "c1", Name: "upper", Arguments: map[string]any{"text": "paris"}},
			{ID: "c2", Name: "broken", Arguments: map[string]any{}},
		}},
		scriptTurn{Content: "done"},
	)
	s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{upper, broken}})
	if err != nil {
		t.Fatal(err)
	}
	events := collect(t, s)
	result, err := s.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if result.GetContent() != "done" || result.GetStopReason() != pb.StopReason_STOP_REASON_FINAL_ANSWER {
		t.Fatalf("unexpected result %v", result)
	}
	byCall := map[string]*pb.ToolCallRecord{}
	for _, rec := range result.GetToolCallHistory() {
		byCall[rec.GetCallId()] = rec
	}
	if rec := byCall["c1"]; !rec.GetSuccess() || rec.GetOutput() != `{"result": "PARIS"}` && rec.GetOutput() != `{"result":"PARIS"}` {
		t.Fatalf("upper's record: %v", rec)
	}
	if rec := byCall["c2"]; rec.GetSuccess() || !strings.Contains(rec.GetError(), "out of order") {
		t.Fatalf("broken's record: %v", rec)
	}
	if events[0].GetRunStarted() == nil || !isTerminal(events[len(events)-1]) {
		t.Fatalf("events do not run from run_started to the terminal event: %v", events)
	}
	for i, ev := range events {
		if ev.GetSequence() != uint64(i+1) {
			t.Fatalf("event %d has sequence %d", i, ev.GetSequence())
		}
	}
	if s.RunID() == "" || s.RunID() != result.GetRunId() {
		t.Fatalf("RunID %q, result's %q", s.RunID(), result.GetRunId())
	}
}

// A runtime's own read_file is no conflict when the run offers none of the sidecar's tools
// (NoServerTools), nor when its ToolNames leave the sidecar's read_file out.
func TestSessionHostsItsOwnReadFileBesideTheSidecarsTools(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	readFile := Tool{Name: "read_file", Func: func(_ context.Context, input json.RawMessage) (any, error) {
		return map[string]string{"mine": string(input)}, nil
	}}
	for _, c := range []struct {
		name    string
		set     func(*pb.RunSpec)
		offered []string
	}{
		{"NoServerTools", func(s *pb.RunSpec) { s.NoServerTools = true }, []string{"read_file"}},
		{"ToolNames", func(s *pb.RunSpec) { s.ToolNames = []string{"echo"} }, []string{"echo", "read_file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := scriptedSpec(t,
				scriptTurn{Content: "reading", ToolCalls: []scriptCall{
					{ID: "r1", Name: "read_file", Arguments: map[string]any{"path": "a"}},
				}},
				scriptTurn{Content: "done"},
			)
			c.set(spec)
			s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{readFile}})
			if err != nil {
				t.Fatal(err)
			}
			events := collect(t, s)
			result, err := s.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := events[0].GetRunStarted().GetSpec().GetToolNames(); strings.Join(got, ",") != strings.Join(c.offered, ",") {
				t.Fatalf("offered %v, want %v", got, c.offered)
			}
			rec := result.GetToolCallHistory()[0]
			if !rec.GetSuccess() || !strings.Contains(rec.GetOutput(), "mine") {
				t.Fatalf("read_file's record: %v", rec)
			}
		})
	}
}

func TestApprovalCallbackDecidesSideEffectCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	ran := map[string]bool{}
	write := Tool{Name: "write", SideEffects: true, Func: func(_ context.Context, input json.RawMessage) (any, error) {
		var in struct{ Path string }
		_ = json.Unmarshal(input, &in)
		ran[in.Path] = true
		return map[string]any{"written": in.Path}, nil
	}}
	asked := 0
	approve := func(_ context.Context, req *pb.ApprovalRequested) (bool, string, error) {
		asked++
		if strings.Contains(req.GetInputs(), ".md") {
			return true, "docs only", nil
		}
		return false, "only Markdown files", nil
	}
	spec := scriptedSpec(t,
		scriptTurn{ToolCalls: []scriptCall{{ID: "c1", Name: "write", Arguments: map[string]any{"path": "NOTES.md"}}}},
		scriptTurn{ToolCalls: []scriptCall{{ID: "c2", Name: "write", Arguments: map[string]any{"path": "build.sh"}}}},
		scriptTurn{Content: "done"},
	)
	s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{write}, Approve: approve})
	if err != nil {
		t.Fatal(err)
	}
	var decided []*pb.ApprovalDecided
	for _, ev := range collect(t, s) {
		if d := ev.GetApprovalDecided(); d != nil {
			decided = append(decided, d)
		}
	}
	result, err := s.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if asked != 2 || len(decided) != 2 || !decided[0].GetApproved() || decided[1].GetApproved() {
		t.Fatalf("asked %d times, decisions %v", asked, decided)
	}
	if decided[1].GetReason() != "only Markdown files" {
		t.Fatalf("the denial's reason was %q", decided[1].GetReason())
	}
	if !ran["NOTES.md"] || ran["build.sh"] {
		t.Fatalf("tool ran for %v", ran)
	}
	if kind := result.GetToolCallHistory()[1].GetErrorKind(); kind != pb.ErrorKind_ERROR_KIND_DENIED {
		t.Fatalf("the denied call's error kind is %v", kind)
	}
}

func TestCancellingTheContextCancelsTheRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	runCtx, stopRun := context.WithCancel(ctx)
	started := make(chan struct{})
	toolEnded := make(chan error, 1)
	hang := Tool{Name: "hang", Func: func(callCtx context.Context, _ json.RawMessage) (any, error) {
		close(started)
		<-callCtx.Done()
		toolEnded <- callCtx.Err()
		return nil, callCtx.Err()
	}}
	spec := scriptedSpec(t, scriptTurn{ToolCalls: []scriptCall{{ID: "c1", Name: "hang", Arguments: map[string]any{}}}})
	s, err := client.StartSession(runCtx, SessionOptions{Spec: spec, Tools: []Tool{hang}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(testWait):
		t.Fatal("the tool was never called")
	}
	stopRun()
	select {
	case <-s.Done():
	case <-time.After(testWait):
		t.Fatal("the session did not end after its context was cancelled")
	}
	result, err := s.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if result.GetStopReason() != pb.StopReason_STOP_REASON_CANCELLED {
		t.Fatalf("stop reason %v", result.GetStopReason())
	}
	if err := <-toolEnded; err == nil {
		t.Fatal("the tool's context did not end")
	}
	got, err := client.GetRun(ctx, result.GetRunId())
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != pb.RunState_RUN_STATE_CANCELLED {
		t.Fatalf("the sidecar says the run is %v", got.GetState())
	}
}

// A watcher reads a run far larger than its window only by acknowledging as asked: without
// acks the sidecar would drop it (watcher_stall_s) with RESOURCE_EXHAUSTED.
func TestWatchAcknowledgesAndReadsARunLargerThanItsWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil, "--watch-window-bytes", "4096", "--watcher-stall-s", "2"))
	s, sessionEvents := bigRun(t, ctx, client)
	w, err := client.Watch(ctx, s.RunID(), WatchOptions{NoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var watched []uint64
	for {
		ev, err := w.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d events: %v", len(watched), err)
		}
		watched = append(watched, ev.GetSequence())
	}
	if len(watched) != len(sessionEvents) || watched[len(watched)-1] != w.LastSequence() {
		t.Fatalf("watched %d events, the session had %d", len(watched), len(sessionEvents))
	}
	// From the middle: only the later events.
	w2, err := client.Watch(ctx, s.RunID(), WatchOptions{AfterSequence: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	ev, err := w2.Next()
	if err != nil || ev.GetSequence() != 11 {
		t.Fatalf("first event after 10: %v, %v", ev, err)
	}
}

// bigRun is a finished run whose log is several times a 4 KiB window: its session and events.
func bigRun(t *testing.T, ctx context.Context, client *Client) (*Session, []*pb.RunEvent) {
	t.Helper()
	big := Tool{Name: "big", Func: func(context.Context, json.RawMessage) (any, error) {
		return map[string]string{"text": strings.Repeat("x", 2000)}, nil
	}}
	var calls []scriptCall
	for i := 0; i < 20; i++ {
		calls = append(calls, scriptCall{ID: fmt.Sprintf("c%d", i), Name: "big", Arguments: map[string]any{}})
	}
	spec := scriptedSpec(t, scriptTurn{ToolCalls: calls}, scriptTurn{Content: "done"})
	s, err := client.StartSession(ctx, SessionOptions{Spec: spec, Tools: []Tool{big}})
	if err != nil {
		t.Fatal(err)
	}
	events := collect(t, s)
	if _, err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return s, events
}

// A watcher the sidecar drops for leaving its window unacknowledged reconnects after the last
// event Next returned: no event is lost or repeated.
func TestWatchResumesAfterTheLastEventWhenTheSidecarDropsIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil, "--watch-window-bytes", "4096", "--watcher-stall-s", "1"))
	s, sessionEvents := bigRun(t, ctx, client)
	w, err := client.Watch(ctx, s.RunID(), WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first, err := w.Next()
	if err != nil {
		t.Fatal(err)
	}
	// Stall: take the stream's messages without handling or acknowledging them, as a watcher
	// that stopped working would, until the sidecar drops the stream.
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
	seqs := []uint64{first.GetSequence()}
	for {
		ev, err := w.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.GetSequence())
	}
	if len(seqs) != len(sessionEvents) {
		t.Fatalf("watched %d events, the run has %d", len(seqs), len(sessionEvents))
	}
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			t.Fatalf("event %d has sequence %d: %v", i, seq, seqs)
		}
	}
}

func TestWatchOfAnUnknownRunIsNotFound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	client := dial(t, ctx, startSidecar(t, nil))
	w, err := client.Watch(ctx, "no-such-run", WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, err = w.Next()
	if status.Code(errors.Unwrap(err)) != codes.NotFound {
		t.Fatalf("got %v", err)
	}
}

func TestDialsAUnixSocketWithAToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	socket := filepath.Join(t.TempDir(), "sidecar.sock")
	env := []string{"GO_TEST_SIDECAR_TOKEN=s3cret"}
	address := startSidecar(t, env, "--listen", "unix:"+socket, "--auth-token-env", "GO_TEST_SIDECAR_TOKEN")
	if !strings.HasPrefix(address, "unix:") {
		t.Fatalf("the sidecar listens on %q", address)
	}
	anonymous := dial(t, ctx, address)
	if _, err := anonymous.RPC.ListTools(ctx, &pb.ListToolsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without a token: %v", err)
	}
	client := dial(t, ctx, address, WithToken("s3cret"))
	tools, err := client.RPC.ListTools(ctx, &pb.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.GetTools()) == 0 {
		t.Fatal("the sidecar lists no tools")
	}
}

func TestEncodeOutputWrapsWhatIsNotAnObject(t *testing.T) {
	cases := map[string]any{
		`{"a":1}`:            map[string]int{"a": 1},
		`{"result":3}`:       3,
		`{"result":null}`:    nil,
		`{"result":[1,2]}`:   []int{1, 2},
		`{"raw": true}`:      json.RawMessage(`{"raw": true}`),
		`{"result":"plain"}`: "plain",
	}
	for want, value := range cases {
		got, err := encodeOutput(value)
		if err != nil || got != want {
			t.Errorf("encodeOutput(%v) = %q, %v; want %q", value, got, err, want)
		}
	}
	if _, err := encodeOutput(func() {}); err == nil {
		t.Error("a func encoded as JSON")
	}
}

// Without WithTransportCredentials the connection is plaintext, and says so: a per-call
// credential that needs privacy (gRPC's OAuth ones) refuses to be sent on it.
func TestAPlaintextConnectionRefusesCredentialsThatNeedPrivacy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	token := oauth.NewOauthAccess(&oauth2.Token{AccessToken: "s3cret"})
	client := dial(t, ctx, startSidecar(t, nil), WithDialOptions(grpc.WithPerRPCCredentials(token)))
	_, err := client.RPC.ListTools(ctx, &pb.ListToolsRequest{})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "SecurityLevel") {
		t.Fatalf("ListTools with an OAuth token on plaintext: %v", err)
	}
}
