// A gRPC peer for `consort bench rpc`: a unary service and its client in one
// process on 127.0.0.1, timing the same null call and 1 MB request as the
// capability RPC, over plain TCP and over TLS 1.3. Prints one JSON line.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"os"
	"sort"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// rawCodec passes byte slices through, so that no protobuf code is needed.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	p := v.(*[]byte)
	*p = append((*p)[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

func call(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var in []byte
	if err := dec(&in); err != nil {
		return nil, err
	}
	out := []byte{}
	return &out, nil
}

var desc = grpc.ServiceDesc{
	ServiceName: "consort.Bench",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Call", Handler: call}},
}

func selfSigned() (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(err)
	tmpl := x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &key.PublicKey, key)
	check(err)
	cert, err := x509.ParseCertificate(der)
	check(err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpc bench:", err)
		os.Exit(1)
	}
}

type result struct {
	NullUs    float64 `json:"null_us"`
	TransMbps float64 `json:"trans_mbps"`
}

func run(secure bool, calls, transfers int) result {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	sopts := []grpc.ServerOption{grpc.ForceServerCodec(rawCodec{}), grpc.MaxRecvMsgSize(8 << 20)}
	copts := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallSendMsgSize(8<<20))}
	target := lis.Addr().String()
	if secure {
		cert, pool := selfSigned()
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})))
		copts = append(copts, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})))
	} else {
		copts = append(copts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	srv := grpc.NewServer(sopts...)
	srv.RegisterService(&desc, nil)
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(target, copts...)
	check(err)
	defer conn.Close()
	ctx := context.Background()
	do := func(b []byte) {
		out := []byte{}
		check(conn.Invoke(ctx, "/consort.Bench/Call", &b, &out))
	}
	do(nil)
	samples := make([]float64, calls)
	for i := range samples {
		t0 := time.Now()
		do(nil)
		samples[i] = float64(time.Since(t0).Nanoseconds()) / 1e3
	}
	sort.Float64s(samples)
	mb := make([]byte, 1_000_000)
	do(mb)
	t0 := time.Now()
	for i := 0; i < transfers; i++ {
		do(mb)
	}
	secs := time.Since(t0).Seconds()
	return result{NullUs: samples[len(samples)/2], TransMbps: float64(transfers) / secs}
}

func main() {
	calls, transfers := 2000, 50
	if len(os.Args) > 2 {
		calls, _ = strconv.Atoi(os.Args[1])
		transfers, _ = strconv.Atoi(os.Args[2])
	}
	plain := run(false, calls, transfers)
	secure := run(true, calls, transfers)
	out, _ := json.Marshal(map[string]result{"plain": plain, "tls": secure})
	fmt.Println(string(out))
}
