package config

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestWebhookAndScheduleFlags(t *testing.T) {
	t.Setenv("HTTPSCALE_WEBHOOK_SELF_MANAGED_CERTS", "false")
	t.Setenv("HTTPSCALE_SCHEDULE_STARTING_DEADLINE", "15m")
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	var w Webhook
	var s Schedules
	w.Bind(fs)
	s.Bind(fs)
	if err := loadEnv(fs); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--webhook-bind-address=127.0.0.1:9555"}); err != nil {
		t.Fatal(err)
	}
	if w.BindAddress != "127.0.0.1:9555" || w.SelfManagedCerts || w.ServiceName != "httpscale-operator-webhook" || s.StartingDeadline != 15*time.Minute {
		t.Errorf("parsed %+v %+v", w, s)
	}
	if err := w.Validate(); err != nil {
		t.Errorf("cert-manager settings rejected: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Errorf("15m deadline rejected: %v", err)
	}
}

func TestWebhookValidateReportsEverything(t *testing.T) {
	w := Webhook{BindAddress: "nonsense", SelfManagedCerts: true, CertValidity: time.Minute, CAValidity: time.Hour}
	err := w.Validate()
	for _, want := range []string{"--webhook-bind-address", "--webhook-service-name", "--webhook-secret-name", "--webhook-configuration-name", "--webhook-cert-validity"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %s", err, want)
		}
	}
	if err := (&Webhook{BindAddress: "0"}).Validate(); err != nil {
		t.Errorf("a disabled webhook needs no other settings: %v", err)
	}
	if err := (&Schedules{StartingDeadline: time.Second}).Validate(); err == nil {
		t.Error("a 1s starting deadline was accepted")
	}
}
