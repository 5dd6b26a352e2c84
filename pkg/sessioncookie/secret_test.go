package sessioncookie

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/httpscale/httpscale/pkg/testenv"
)

// TestSecretKeeperAgainstAPIServer: the chart's empty Secret gets a valid key, a key that is there
// (the administrator's) is never replaced, an invalid one is reported and left alone, and a missing
// Secret is created.
func TestSecretKeeperAgainstAPIServer(t *testing.T) {
	_, cfg := testenv.StartT(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	const ns = "httpscale-system"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	keysOf := func(name string) []byte {
		t.Helper()
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Data[SecretKey]
	}
	keeper := func(name string) *SecretKeeper {
		return &SecretKeeper{Client: cs, Namespace: ns, Name: name, Log: logr.Discard()}
	}

	// The chart's Secret: no data.
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "session-keys"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := keeper("session-keys").Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	written := keysOf("session-keys")
	if k, err := ParseKeys(written); err != nil || k.Len() != 1 {
		t.Fatalf("written keys %q: %v", written, err)
	}
	if err := keeper("session-keys").Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if got := keysOf("session-keys"); string(got) != string(written) {
		t.Error("a second Ensure replaced the key")
	}

	// The administrator rotates: new key first, old one kept. Left as written.
	rotated := "new-key-0123456789abcdef\n" + string(written)
	s, _ := cs.CoreV1().Secrets(ns).Get(ctx, "session-keys", metav1.GetOptions{})
	s.Data[SecretKey] = []byte(rotated)
	if _, err := cs.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := keeper("session-keys").Ensure(ctx); err != nil || string(keysOf("session-keys")) != rotated {
		t.Errorf("after a rotation: %v, keys %q", err, keysOf("session-keys"))
	}

	// An invalid key is reported, not replaced.
	s, _ = cs.CoreV1().Secrets(ns).Get(ctx, "session-keys", metav1.GetOptions{})
	s.Data[SecretKey] = []byte("short")
	if _, err := cs.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := keeper("session-keys").Ensure(ctx); err == nil || !strings.Contains(err.Error(), "fix or empty it") {
		t.Errorf("invalid key: %v, want an error saying what to do", err)
	}
	if string(keysOf("session-keys")) != "short" {
		t.Error("an invalid key was replaced")
	}

	// No Secret at all: created.
	if err := keeper("other-keys").Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseKeys(keysOf("other-keys")); err != nil {
		t.Error(err)
	}
}
