// Package sidecar is a small Go client of the cleveragents tool-runtime sidecar: Dial it, run a
// Session whose tools are Go functions, and follow runs with acknowledgements.
//
// The generated gRPC stubs are in the sibling package toolruntimev1; Client.RPC exposes them
// for every call this package does not wrap.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
)

// Client is a connection to one sidecar; it is safe for concurrent use.
type Client struct {
	conn *grpc.ClientConn
	// RPC is the generated stub on the same connection, for the calls not wrapped here.
	RPC pb.ToolRuntimeServiceClient
}

type dialConfig struct {
	token string
	creds credentials.TransportCredentials
	extra []grpc.DialOption
}

// Option configures Dial.
type Option func(*dialConfig)

// WithToken sends "authorization: Bearer <token>" on every call, as a sidecar with auth_tokens
// requires.
func WithToken(token string) Option {
	return func(c *dialConfig) { c.token = token }
}

// WithTransportCredentials dials with TLS (or mutual TLS) instead of plaintext.
func WithTransportCredentials(creds credentials.TransportCredentials) Option {
	return func(c *dialConfig) { c.creds = creds }
}

// WithDialOptions passes further options to the dial (grpc.DialContext).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *dialConfig) { c.extra = append(c.extra, opts...) }
}

// Dial connects to a sidecar at target: "host:port", or "unix:/path" (also "unix:///path") for
// a unix socket, the forms the sidecar's --listen takes. It does not wait for the sidecar to
// answer: call WaitForReady for that. Without WithTransportCredentials it speaks plaintext.
//
// The dial is grpc.DialContext without grpc.WithBlock, which is what grpc.NewClient does in
// the releases that have it (1.63 on). This module builds against gRPC 1.33, Debian's, which
// has neither grpc.NewClient nor the credentials/insecure package: plaintext is therefore
// this package's own TransportCredentials (see plaintext), as insecure.NewCredentials would
// be, rather than the grpc.WithInsecure that later releases deprecate. DialContext is the
// newest dial 1.33 has; later releases keep it, deprecated, throughout 1.x.
func Dial(ctx context.Context, target string, opts ...Option) (*Client, error) {
	var cfg dialConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	dialOpts := []grpc.DialOption{}
	if cfg.creds != nil {
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(cfg.creds))
	} else {
		dialOpts = append(dialOpts, grpc.WithTransportCredentials(plaintext{}))
	}
	if cfg.token != "" {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(bearer{token: cfg.token, secure: cfg.creds != nil}))
	}
	if path, ok := unixPath(target); ok {
		// This gRPC release has no unix resolver of its own: dial the socket directly.
		dialOpts = append(dialOpts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}))
		target = "passthrough:///localhost"
	}
	conn, err := grpc.DialContext(ctx, target, append(dialOpts, cfg.extra...)...)
	if err != nil {
		return nil, fmt.Errorf("dial sidecar at %s: %w", target, err)
	}
	return &Client{conn: conn, RPC: pb.NewToolRuntimeServiceClient(conn)}, nil
}

func unixPath(target string) (string, bool) {
	if !strings.HasPrefix(target, "unix:") {
		return "", false
	}
	path := strings.TrimPrefix(target, "unix:")
	if strings.HasPrefix(path, "//") {
		path = strings.TrimPrefix(path, "//")
	}
	return path, path != ""
}

// Close ends the connection; calls still open on it fail.
func (c *Client) Close() error {
	return c.conn.Close()
}

// WaitForReady blocks until the connection is ready or ctx ends, for the start-up race of a
// runtime that has just spawned its sidecar.
func (c *Client) WaitForReady(ctx context.Context) error {
	for {
		state := c.conn.GetState()
		if state == connectivity.Ready {
			return nil
		}
		if state == connectivity.Shutdown {
			return errors.New("the connection is closed")
		}
		if !c.conn.WaitForStateChange(ctx, state) {
			return fmt.Errorf("no sidecar answered (last state %s): %w", state, ctx.Err())
		}
	}
}

// CancelRun stops a live run; its events end with run_cancelled carrying reason.
func (c *Client) CancelRun(ctx context.Context, runID, reason string) (pb.RunState, error) {
	resp, err := c.RPC.CancelRun(ctx, &pb.CancelRunRequest{RunId: runID, Reason: reason})
	if err != nil {
		return pb.RunState_RUN_STATE_UNSPECIFIED, err
	}
	return resp.GetState(), nil
}

// GetRun reports a run's state, and its result once it has ended.
func (c *Client) GetRun(ctx context.Context, runID string) (*pb.GetRunResponse, error) {
	return c.RPC.GetRun(ctx, &pb.GetRunRequest{RunId: runID})
}

// bearer sends the token as call metadata.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false for plaintext: a sidecar on loopback or a unix socket.
func (b bearer) RequireTransportSecurity() bool { return b.secure }
