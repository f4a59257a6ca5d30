package sidecar

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"
)

// plaintext is transport credentials that secure nothing: the connection as it is, for a
// sidecar on loopback or a unix socket. It is what google.golang.org/grpc/credentials/insecure
// provides from gRPC 1.34 on; the gRPC this module builds against (1.33) has no such package,
// and grpc.WithInsecure, its only other way to plaintext, is deprecated in later releases.
type plaintext struct{}

// plaintextInfo says the connection has no security (credentials.NoSecurity): per-call
// credentials that check the level (credentials.CheckSecurityLevel, as gRPC's oauth ones
// do) refuse to be sent on it. gRPC 1.33's transport does not itself refuse credentials
// whose RequireTransportSecurity is true once transport credentials are set, as it did for
// grpc.WithInsecure; from 1.34 on it reads this level and refuses them.
type plaintextInfo struct {
	credentials.CommonAuthInfo
}

func (*plaintextInfo) AuthType() string { return "insecure" }

// newPlaintextInfo is a pointer: 1.33's GetCommonAuthInfo, which CheckSecurityLevel looks
// for, has a pointer receiver.
func newPlaintextInfo() credentials.AuthInfo {
	return &plaintextInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}
}

func (plaintext) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, newPlaintextInfo(), nil
}

func (plaintext) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, newPlaintextInfo(), nil
}

// Info names the protocol "insecure", as gRPC's own insecure credentials do: anything but
// "tls" makes the transport send the :scheme http.
func (plaintext) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (plaintext) Clone() credentials.TransportCredentials { return plaintext{} }

func (plaintext) OverrideServerName(string) error { return nil }
