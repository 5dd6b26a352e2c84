package framework

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/admin"
)

// fleetTokenLife is how long the token FleetToken creates is valid; a new one is created when less
// than fleetTokenRenew of it is left.
const fleetTokenLife, fleetTokenRenew = 2 * time.Hour, 30 * time.Minute

// fleetTokens is FleetToken's token, created once per process (and again before it expires): the
// interceptors review a token once and then cache their decision, so reads on the admin port with
// one token cost no review each and cannot fail for lack of one (an interceptor cut off from the API
// server still accepts a token it has reviewed, see pkg/admin.Auth), as with the scaler's and the
// operator's tokens; and a read costs no kubectl run.
var fleetTokens struct {
	sync.Mutex
	token   string
	expires time.Time
}

// FleetToken returns a token of the scaler's ServiceAccount bound to the admin port's audience: what
// the scaler and the operator present (see admin.TokenTransport).
func (f *Framework) FleetToken(ctx context.Context) (string, error) {
	m := &fleetTokens
	m.Lock()
	defer m.Unlock()
	if m.token != "" && time.Until(m.expires) > fleetTokenRenew {
		return m.token, nil
	}
	created := time.Now()
	tok, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "create", "token", "httpscale-scaler",
		"--audience", admin.DefaultTokenAudience, "--duration", fleetTokenLife.String())
	if err != nil {
		return "", fmt.Errorf("creating an admin-port token: %w", err)
	}
	m.token, m.expires = strings.TrimSpace(tok), created.Add(fleetTokenLife)
	return m.token, nil
}
