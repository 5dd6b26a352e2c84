package scaling

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/trigger"
)

func TestGRPCRejectsMalformedAndHugeMetadataAndAnswersUnknownApps(t *testing.T) {
	h := startHarness(t, harnessOptions{replicas: 1})
	h.ics[0].Counts().Set("ns/app", 2, 0)
	testenv.EventuallyDetail(t, 10*time.Second, "counted", metricIs(h, appMD, trigger.MetricConcurrency, 2))
	ctx := context.Background()

	for name, tc := range map[string]struct {
		md   map[string]string
		code codes.Code
	}{
		"not an app key":      {map[string]string{trigger.KeyHTTPScaledObject: "no-slash", trigger.KeyConcurrencyTarget: "1"}, codes.InvalidArgument},
		"no app":              {map[string]string{trigger.KeyConcurrencyTarget: "1"}, codes.InvalidArgument},
		"app key of 3 MB":     {map[string]string{trigger.KeyHTTPScaledObject: "ns/" + strings.Repeat("x", 3<<20), trigger.KeyConcurrencyTarget: "1"}, codes.InvalidArgument},
		"3 MB that is no key": {map[string]string{trigger.KeyHTTPScaledObject: strings.Repeat("x", 3<<20), trigger.KeyConcurrencyTarget: "1"}, codes.InvalidArgument},
		"3 MB target":         {map[string]string{trigger.KeyHTTPScaledObject: "ns/app", trigger.KeyConcurrencyTarget: strings.Repeat("9", 3<<20)}, codes.InvalidArgument},
		"message above 4 MiB": {map[string]string{trigger.KeyHTTPScaledObject: "ns/app", "junk": strings.Repeat("x", 5<<20)}, codes.ResourceExhausted},
		"NaN target":          {map[string]string{trigger.KeyHTTPScaledObject: "ns/app", trigger.KeyConcurrencyTarget: "NaN"}, codes.InvalidArgument},
		"infinite target":     {map[string]string{trigger.KeyHTTPScaledObject: "ns/app", trigger.KeyRequestRateTarget: "+Inf"}, codes.InvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := h.client.IsActive(ctx, ref(tc.md))
			if got := status.Code(err); got != tc.code {
				t.Errorf("IsActive: %v, want code %s", err, tc.code)
			}
			if len(status.Convert(err).Message()) > 64<<10 {
				t.Errorf("error message of %d bytes echoes the input", len(status.Convert(err).Message()))
			}
			stream, err := h.client.StreamIsActive(ctx, ref(tc.md))
			if err == nil {
				_, err = stream.Recv()
			}
			if got := status.Code(err); got != tc.code {
				t.Errorf("StreamIsActive: %v, want code %s", err, tc.code)
			}
			// The connection and the real app's answers are unaffected.
			if got := h.metric(appMD, trigger.MetricConcurrency); got != 2 {
				t.Errorf("ns/app concurrency after a bad call = %v, want 2", got)
			}
		})
	}
	h.state.wmu.RLock()
	for app := range h.state.windows {
		if len(app) > 1000 {
			t.Errorf("a %d-byte app key from a rejected call is remembered", len(app))
		}
	}
	h.state.wmu.RUnlock()

	unknown := trigger.Metadata{App: "ns/nobody", ConcurrencyTarget: 1, RequestRateTarget: 1}.Encode("s:1")
	if h.isActive(unknown) {
		t.Error("an app no replica counts is active")
	}
	if got := h.metric(unknown, trigger.MetricConcurrency); got != 0 {
		t.Errorf("unknown app concurrency = %v, want 0", got)
	}
	if got := h.metric(unknown, trigger.MetricRequestRate); got != 0 {
		t.Errorf("unknown app rate = %v, want 0", got)
	}
}

// TestGRPCManyStreamsAndOneThatNeverReads opens hundreds of StreamIsActive streams, plus one whose
// client never reads while its app's activity keeps changing: every other stream still gets its own
// app's notice at once and nobody else's, closed streams leave no subscription behind, and the server
// still stops within its shutdown timeout (the harness checks that at cleanup) although the stuck
// stream's sends are blocked by flow control.
func TestGRPCManyStreamsAndOneThatNeverReads(t *testing.T) {
	const streams = 300
	// Registered before the harness, so that it runs after the harness stopped the server: the stuck
	// client is still connected while the server shuts down.
	var stuckConn *grpc.ClientConn
	t.Cleanup(func() {
		if stuckConn != nil {
			stuckConn.Close()
		}
	})
	h := startHarness(t, harnessOptions{replicas: 1, server: ServerOptions{ShutdownTimeout: 500 * time.Millisecond}})

	// A connection with a fixed 64 KiB window, so that unread messages stall the server's sends.
	var err error
	stuckConn, err = grpc.NewClient(h.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	stuckMD := trigger.Metadata{App: "ns/stuck", RequestRateTarget: 1}.Encode("s:1")
	if _, err := externalscaler.NewExternalScalerClient(stuckConn).StreamIsActive(context.Background(), ref(stuckMD)); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyDetail(t, 10*time.Second, "stuck stream subscribed", func() (bool, string) {
		h.state.mu.Lock()
		defer h.state.mu.Unlock()
		return len(h.state.subs["ns/stuck"]) == 1, "not yet"
	})
	// Far more than 64 KiB of messages for the stuck stream.
	floodDone := make(chan struct{})
	go func() {
		defer close(floodDone)
		// Yield after each notice so that the stream sends one message per notice.
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			h.state.Wake("ns/stuck", time.Now())
			runtime.Gosched()
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	var list []externalscaler.ExternalScaler_StreamIsActiveClient
	for i := range streams {
		md := trigger.Metadata{App: fmt.Sprintf("ns/app-%d", i), RequestRateTarget: 1}.Encode("s:1")
		s, err := h.client.StreamIsActive(ctx, ref(md))
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := recvWithin(t, s, 10*time.Second); v {
			t.Fatalf("stream %d: first message true", i)
		}
		list = append(list, s)
	}
	<-floodDone
	h.ics[0].Wake("ns/app-7")
	if v, d := recvWithin(t, list[7], 5*time.Second); !v {
		t.Fatal("ns/app-7's stream got false after its wake notice")
	} else if d > 2*time.Second {
		t.Errorf("wake notice took %s with a stuck stream on the server", d)
	}
	// Nobody else's stream heard about it.
	got := make(chan int, 1)
	go func() {
		if _, err := list[8].Recv(); err == nil {
			got <- 8
		}
	}()
	select {
	case i := <-got:
		t.Errorf("stream %d received a message for another app's wake notice", i)
	case <-time.After(200 * time.Millisecond):
	}

	cancel()
	testenv.EventuallyDetail(t, 10*time.Second, "closed streams unsubscribed", func() (bool, string) {
		h.state.mu.Lock()
		defer h.state.mu.Unlock()
		return len(h.state.subs) == 1, fmt.Sprintf("%d apps with subscribers", len(h.state.subs))
	})
}
