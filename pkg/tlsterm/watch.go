package tlsterm

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/httpscale/httpscale/pkg/routing"
)

// Watcher keeps a Store's certificates in step with their Secrets. It watches each Secret the store
// needs on its own, with a metadata.name field selector, so the interceptor needs get, list and
// watch on exactly those Secrets (a Role with resourceNames, which the operator maintains) and never
// lists a namespace's Secrets. A Secret that changes is parsed again and the new certificate serves
// the next handshake; one that is deleted or invalid is dropped from the store alone.
//
// Watcher is a controller-runtime Runnable; OnTable may be called before Start.
type Watcher struct {
	client kubernetes.Interface
	store  *Store
	log    logr.Logger

	mu      sync.Mutex
	ctx     context.Context               // set by Start; nil before
	running map[string]context.CancelFunc // by Secret "namespace/name"
}

// NewWatcher returns a Watcher loading store's Secrets through client.
func NewWatcher(client kubernetes.Interface, store *Store, log logr.Logger) *Watcher {
	return &Watcher{client: client, store: store, log: log, running: map[string]context.CancelFunc{}}
}

// OnTable gives the store the new table and starts or stops Secret watches to match it. It is a
// tablewatch callback: cheap, never blocks on the API server.
func (w *Watcher) OnTable(t *routing.Table) {
	w.store.SetTable(t)
	w.sync()
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica serves TLS.
func (w *Watcher) NeedLeaderElection() bool { return false }

// Start runs the watches until ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	w.sync()
	<-ctx.Done()
	return nil
}

// Watching returns how many Secrets are watched.
func (w *Watcher) Watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

func (w *Watcher) sync() {
	want := w.store.Secrets()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil {
		return
	}
	for key, stop := range w.running {
		if _, ok := want[key]; !ok {
			stop()
			delete(w.running, key)
			w.store.SetCertificate(key, nil)
			w.log.V(1).Info("stopped watching TLS Secret", "secret", key)
		}
	}
	for key := range want {
		if _, ok := w.running[key]; ok {
			continue
		}
		ctx, stop := context.WithCancel(w.ctx)
		w.running[key] = stop
		go w.watch(ctx, key)
	}
}

// watch runs one Secret's informer until ctx ends. A forbidden list (the operator has not granted
// the Secret yet) is retried by the informer with backoff.
func (w *Watcher) watch(ctx context.Context, key string) {
	ns, name, _ := strings.Cut(key, "/")
	lw := toolscache.NewFilteredListWatchFromClient(w.client.CoreV1().RESTClient(), "secrets", ns,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
	load := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok || s.Name != name {
			return
		}
		cert, err := ParseSecret(s)
		if err != nil {
			var se *SecretError
			if !errors.As(err, &se) {
				se = &SecretError{Reason: "Invalid", Message: err.Error()}
			}
			w.log.Info("TLS Secret not usable; its hosts get the next certificate that matches", "secret", key, "reason", se.Reason, "error", se.Message)
			w.setIfCurrent(ctx, key, nil)
			return
		}
		w.log.V(1).Info("loaded TLS certificate", "secret", key)
		w.setIfCurrent(ctx, key, cert)
	}
	inf := toolscache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, toolscache.Indexers{})
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    load,
		UpdateFunc: func(_, obj any) { load(obj) },
		DeleteFunc: func(any) {
			w.log.Info("TLS Secret deleted; its hosts get the next certificate that matches", "secret", key)
			w.setIfCurrent(ctx, key, nil)
		},
	})
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *toolscache.Reflector, err error) {
		w.log.V(1).Info("watching TLS Secret", "secret", key, "error", err.Error())
	})
	inf.RunWithContext(ctx)
}

// setIfCurrent stores cert unless ctx (the watch) has ended: a stopped watch must not bring back a
// certificate the table no longer names.
func (w *Watcher) setIfCurrent(ctx context.Context, key string, cert *tls.Certificate) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	w.store.SetCertificate(key, cert)
}
