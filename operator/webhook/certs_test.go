package webhook

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"
)

var testCfg = certConfig{
	DNSNames:     ServiceDNSNames("httpscale-operator-webhook", "httpscale-system"),
	IPs:          []net.IP{net.ParseIP("127.0.0.1")},
	CAValidity:   300 * 24 * time.Hour,
	CertValidity: 30 * 24 * time.Hour,
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// verify checks that the serving certificate in data is trusted by bundle for name at now, as the
// API server would check it.
func verify(t *testing.T, data map[string][]byte, bundle []byte, name string, now time.Time) error {
	t.Helper()
	if _, err := tls.X509KeyPair(data[KeyCert], data[KeyKey]); err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("CA bundle holds no certificate")
	}
	_, err := parseCerts(data[KeyCert])[0].Verify(x509.VerifyOptions{DNSName: name, Roots: pool, CurrentTime: now})
	return err
}

func TestRotateIssuesATrustedCertificateForTheServiceNames(t *testing.T) {
	data, next, changed, err := rotate(t0, nil, testCfg)
	if err != nil || !changed {
		t.Fatalf("first rotate: changed %v err %v", changed, err)
	}
	for _, name := range append(testCfg.DNSNames, "127.0.0.1") {
		if err := verify(t, data, data[KeyCA], name, t0); err != nil {
			t.Errorf("certificate not valid for %s: %v", name, err)
		}
	}
	if err := verify(t, data, data[KeyCA], "other.example.com", t0); err == nil {
		t.Error("certificate is valid for a name it must not cover")
	}
	if want := t0.Add(20 * 24 * time.Hour).Add(-skew / 3); !next.Equal(want) {
		// Lifetime is 30d plus the 1h skew allowance; renewal two thirds in.
		t.Errorf("next = %s, want %s", next, want)
	}
}

func TestRotateKeepsACurrentCertificate(t *testing.T) {
	data, _, _, _ := rotate(t0, nil, testCfg)
	again, _, changed, err := rotate(t0.Add(10*24*time.Hour), data, testCfg)
	if err != nil || changed {
		t.Fatalf("ten days in: changed %v err %v, want the certificate kept", changed, err)
	}
	if !bytes.Equal(again[KeyCert], data[KeyCert]) || !bytes.Equal(again[KeyCA], data[KeyCA]) {
		t.Error("certificate or CA changed although nothing was due")
	}
}

func TestRotateRenewsTheServingCertificateBeforeExpiry(t *testing.T) {
	data, next, _, _ := rotate(t0, nil, testCfg)
	at := next.Add(time.Minute)
	renewed, next2, changed, err := rotate(at, data, testCfg)
	if err != nil || !changed {
		t.Fatalf("at renewal: changed %v err %v", changed, err)
	}
	if bytes.Equal(renewed[KeyCert], data[KeyCert]) {
		t.Fatal("serving certificate not replaced at its renewal time")
	}
	if !bytes.Equal(renewed[KeyCA], data[KeyCA]) {
		t.Error("CA replaced although it is far from expiry")
	}
	if err := verify(t, renewed, data[KeyCA], testCfg.DNSNames[3], at); err != nil {
		t.Errorf("renewed certificate not trusted by the published bundle: %v", err)
	}
	if !next2.After(at.Add(19 * 24 * time.Hour)) {
		t.Errorf("next renewal %s too soon after %s", next2, at)
	}
}

func TestRotateReplacesTheCAKeepingTheOldOneTrustedUntilItExpires(t *testing.T) {
	data, next, _, _ := rotate(t0, nil, testCfg)
	oldCA := parseCerts(data[KeyCA])[0]
	at := renewAt(oldCA).Add(time.Minute)
	// Run the operator's renewals up to the CA's renewal: the last serving certificate is still valid.
	for renewals := 0; next.Before(renewAt(oldCA)); renewals++ {
		var err error
		if data, next, _, err = rotate(next.Add(time.Minute), data, testCfg); err != nil || renewals > 100 {
			t.Fatalf("renewal %d: %v", renewals, err)
		}
	}
	if !parseCerts(data[KeyCA])[0].Equal(oldCA) {
		t.Fatal("CA replaced before its renewal time")
	}
	rotated, next, changed, err := rotate(at, data, testCfg)
	if err != nil || !changed {
		t.Fatalf("at CA renewal: changed %v err %v", changed, err)
	}
	bundle := parseCerts(rotated[KeyCA])
	if len(bundle) != 2 || bundle[0].Equal(oldCA) || !bundle[1].Equal(oldCA) {
		t.Fatalf("bundle after CA rotation has %d CAs, want the new one first and the old one second", len(bundle))
	}
	if err := verify(t, rotated, rotated[KeyCA], testCfg.DNSNames[2], at); err != nil {
		t.Errorf("new certificate not trusted by the new bundle: %v", err)
	}
	// A replica still serving the old certificate stays trusted by the new bundle.
	if err := verify(t, data, rotated[KeyCA], testCfg.DNSNames[2], at); err != nil {
		t.Errorf("old certificate not trusted by the new bundle during the overlap: %v", err)
	}
	if !next.After(at) {
		t.Errorf("next = %s, not after %s", next, at)
	}

	// Once the old CA has expired it leaves the bundle.
	later := oldCA.NotAfter.Add(time.Hour)
	pruned, _, _, err := rotate(later, rotated, testCfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(parseCerts(pruned[KeyCA])); n != 1 {
		t.Errorf("bundle holds %d CAs after the old one expired, want 1", n)
	}
}

func TestRotateReissuesWhenNamesChangeOrDataIsBroken(t *testing.T) {
	data, _, _, _ := rotate(t0, nil, testCfg)
	moreNames := testCfg
	moreNames.DNSNames = append(append([]string(nil), testCfg.DNSNames...), "webhook.example.internal")
	out, _, changed, err := rotate(t0.Add(time.Hour), data, moreNames)
	if err != nil || !changed {
		t.Fatalf("new name: changed %v err %v", changed, err)
	}
	if err := verify(t, out, out[KeyCA], "webhook.example.internal", t0.Add(time.Hour)); err != nil {
		t.Errorf("reissued certificate does not cover the new name: %v", err)
	}

	broken := map[string][]byte{KeyCert: []byte("garbage"), KeyKey: data[KeyKey], KeyCA: data[KeyCA], KeyCAKey: []byte("garbage")}
	out, _, changed, err = rotate(t0.Add(time.Hour), broken, testCfg)
	if err != nil || !changed {
		t.Fatalf("broken data: changed %v err %v", changed, err)
	}
	if err := verify(t, out, out[KeyCA], testCfg.DNSNames[0], t0.Add(time.Hour)); err != nil {
		t.Errorf("certificate issued over broken data is not trusted: %v", err)
	}
}
