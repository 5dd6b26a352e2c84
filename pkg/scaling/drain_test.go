package scaling

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/httpscale/httpscale/pkg/trigger"
)

// A scaler replica that is stopped (its pod deleted, a rollout, a drain) must not leave KEDA without
// wakes: KEDA (v2.21) opens a StreamIsActive stream again only 2 s after it ended cleanly, and after
// an error only after a backoff that doubles up to a minute. So the replica serves on through its
// drain delay, with its readiness failing so that kube-proxy sends new connections elsewhere, keeps
// pushing wakes on the streams it holds, then ends them cleanly (io.EOF at the client) after GOAWAY,
// so that KEDA's next stream goes to a live replica on a new connection.
func TestDrainServesStreamsThroughTheDelayThenEndsThemCleanly(t *testing.T) {
	const delay = 400 * time.Millisecond
	state := NewState(30 * time.Second)
	state.Publish(&Snapshot{At: time.Now(), Apps: map[string]*AppStats{}}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ServerOptions{Listener: lis, DrainDelay: delay, Log: testLog(t)}, state)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := externalscaler.NewExternalScalerClient(conn)
	md := trigger.Metadata{App: "ns/app", ConcurrencyTarget: 1}.Encode("s:1")
	stream, err := client.StreamIsActive(context.Background(), ref(md))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := recvWithin(t, stream, 5*time.Second); v {
		t.Fatal("first message true before any traffic")
	}

	stopped := time.Now()
	stop()
	waitFor(t, "Draining", srv.Draining)
	health, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || health.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health while draining: %v %v, want NOT_SERVING", health, err)
	}

	state.Wake("ns/app", time.Now())
	if v, _ := recvWithin(t, stream, delay); !v {
		t.Fatal("a wake during the drain delay did not reach the open stream")
	}
	if _, err := client.IsActive(context.Background(), ref(md)); err != nil {
		t.Errorf("IsActive on the open connection during the drain delay: %v", err)
	}

	// The stream ends, cleanly: KEDA resets its retry to 2 s only on io.EOF.
	var end error
	for end == nil {
		_, end = stream.Recv()
	}
	if !errors.Is(end, io.EOF) {
		t.Errorf("the stream ended with %v, want a clean end (io.EOF at the client)", end)
	}
	if took := time.Since(stopped); took < delay {
		t.Errorf("the stream ended %s after the stop, before the drain delay of %s", took, delay)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server still running 10s after the drain")
	}
	select {
	case <-srv.Stopped():
	default:
		t.Error("Stopped not closed after Start returned")
	}
}

// waitFor polls cond every millisecond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
	}
}
