package sidecar

import (
	"context"
	"crypto/tls"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/durashuffle/durashuffle/flightclient"
	"github.com/durashuffle/durashuffle/manifest"
)

// peerTLS is the client side of TLS for peer calls: the sidecar's own
// certificate (for peers that require mutual TLS), and as roots
// tls_client_ca_file's alone, the CA that signs the cluster's sidecars,
// when it is set (else the system's). A worker manifest names its peer:
// with the cluster's CA alone, a peer field pointing elsewhere gets no
// bearer token from a host with a publicly trusted certificate.
func peerTLS(server *tls.Config) *tls.Config {
	if server == nil {
		return nil
	}
	return &tls.Config{Certificates: server.Certificates, RootCAs: server.ClientCAs, MinVersion: tls.VersionTLS12}
}

// fetch serves a peer's FetchRequest from the memory store: Results of
// at most flightclient.MaxResultBytes whose bodies are the bytes; NotFound for
// what is not held. It never reads the object store.
func (s *Server) fetch(ctx context.Context, body []byte, stream flight.FlightService_DoActionServer) error {
	var req flightclient.FetchRequest
	if err := decodeStrict("fetch body", body, &req); err != nil {
		return err
	}
	if req.Length < 0 || req.Length > flightclient.MaxFetchBytes {
		return invalidf("fetch: length %d out of range [0, %d]", req.Length, flightclient.MaxFetchBytes)
	}
	if req.Offset < 0 {
		return invalidf("fetch: offset %d is negative", req.Offset)
	}
	// Read and sent a result at a time: a range of many chunks is not
	// gathered whole while a slow caller reads it.
	for sent := int64(0); sent < req.Length || sent == 0; {
		if ctx.Err() != nil {
			return toStatus(context.Cause(ctx))
		}
		n := min(req.Length-sent, flightclient.MaxResultBytes)
		b, err := s.c.MemoryRead(req.Query, req.Stage, req.Worker, req.Attempt, req.Object, req.Offset+sent, n)
		if err != nil {
			return status.Error(codes.NotFound, err.Error())
		}
		if n == 0 {
			return nil
		}
		if err := stream.Send(&flight.Result{Body: b}); err != nil {
			return err
		}
		s.m.PeerSent(n)
		sent += n
	}
	return nil
}

// release drops a stage's (or a query's) workers from the memory store.
func (s *Server) release(body []byte) (*flightclient.ReleaseResult, error) {
	var req flightclient.ReleaseRequest
	if err := decodeStrict("release body", body, &req); err != nil {
		return nil, err
	}
	if err := manifest.ValidateID("query", req.Query); err != nil {
		return nil, invalidf("release: %v", err)
	}
	stage := -1
	if req.Stage != nil {
		if err := manifest.ValidateStage(*req.Stage); err != nil {
			return nil, invalidf("release: %v", err)
		}
		stage = *req.Stage
	}
	n, bytes := s.c.MemoryRelease(req.Query, stage)
	s.log.Info("released from memory", "query", req.Query, "stage", stage, "workers", n, "bytes", bytes)
	return &flightclient.ReleaseResult{Query: req.Query, Stage: req.Stage, Workers: n, BytesReleased: bytes}, nil
}

// held lists what the memory store holds.
func (s *Server) held(body []byte) (*flightclient.HeldResult, error) {
	var req flightclient.HeldRequest
	if len(body) > 0 {
		if err := decodeStrict("held body", body, &req); err != nil {
			return nil, err
		}
	}
	stage := -1
	if req.Stage != nil {
		if stage = *req.Stage; stage < 0 && stage != flightclient.AllStages {
			return nil, invalidf("held: stage %d: want a stage (at least 0), or %d for every stage", stage, flightclient.AllStages)
		}
	}
	budget, h, r, held := s.c.MemoryHeld(req.Query, stage)
	res := &flightclient.HeldResult{AdvertiseAddr: s.cfg.Sidecar.AdvertiseAddr, BudgetBytes: budget, HeldBytes: h, ReservedBytes: r, Workers: []flightclient.HeldWorker{}}
	for _, w := range held {
		res.Workers = append(res.Workers, flightclient.HeldWorker{Query: w.Query, Stage: w.Stage, Worker: w.Worker, Attempt: w.Attempt, Bytes: w.Bytes, Read: w.Read})
	}
	slices.SortFunc(res.Workers, func(a, b flightclient.HeldWorker) int {
		if c := strings.Compare(a.Query, b.Query); c != 0 {
			return c
		}
		if a.Stage != b.Stage {
			return a.Stage - b.Stage
		}
		return strings.Compare(a.Worker, b.Worker)
	})
	return res, nil
}
