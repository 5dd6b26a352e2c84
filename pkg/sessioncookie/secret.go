package sessioncookie

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// SecretKey is the key of a session-keys Secret's data that holds the keys (ParseKeys' format); a
// Secret mounted as a volume shows it as a file of that name.
const SecretKey = "keys"

// SecretKeeper makes sure the fleet's session-keys Secret holds a key: the chart creates the Secret
// empty (so that rendering the chart stays deterministic and an upgrade never replaces a key), and
// the operator's elected replica writes a random 256-bit key into it when it has none. A key that is
// there is never changed: rotation is the administrator's (see the docs). It is a controller-runtime
// Runnable that checks at start and every Every.
type SecretKeeper struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Every is how often the Secret is checked again (a key deleted by hand is replaced); 0 means
	// five minutes.
	Every time.Duration
	Log   logr.Logger
}

// NeedLeaderElection reports true: one writer.
func (k *SecretKeeper) NeedLeaderElection() bool { return true }

// Start ensures the key until ctx ends. Failures are logged and retried at the next check.
func (k *SecretKeeper) Start(ctx context.Context) error {
	every := k.Every
	if every <= 0 {
		every = 5 * time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := k.Ensure(ctx); err != nil && ctx.Err() == nil {
			k.Log.Error(err, "session keys not ensured; retrying", "secret", k.Namespace+"/"+k.Name)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Ensure writes a random key into the Secret when it holds none (creating the Secret when it does
// not exist). Keys an administrator wrote, valid or not, are left alone; invalid ones are reported.
func (k *SecretKeeper) Ensure(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	secrets := k.Client.CoreV1().Secrets(k.Namespace)
	s, err := secrets.Get(ctx, k.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{SecretKey: newKeyLine()}}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating session-keys Secret %s/%s: %w", k.Namespace, k.Name, err)
		}
		k.Log.Info("session key written", "secret", k.Namespace+"/"+k.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading session-keys Secret %s/%s: %w", k.Namespace, k.Name, err)
	}
	if len(bytes.TrimSpace(s.Data[SecretKey])) > 0 {
		if _, err := ParseKeys(s.Data[SecretKey]); err != nil {
			return fmt.Errorf("session-keys Secret %s/%s: %w; fix or empty it (an empty one gets a new key)", k.Namespace, k.Name, err)
		}
		return nil
	}
	s = s.DeepCopy()
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[SecretKey] = newKeyLine()
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing session key into %s/%s: %w", k.Namespace, k.Name, err)
	}
	k.Log.Info("session key written", "secret", k.Namespace+"/"+k.Name)
	return nil
}

// newKeyLine returns a random 256-bit key as one line of text.
func newKeyLine() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return []byte(base64.RawURLEncoding.EncodeToString(b) + "\n")
}
