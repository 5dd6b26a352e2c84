package admin

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/transport"
)

// TokenTransport returns rt with every request carrying the bearer token read from file, a
// projected ServiceAccount token bound to the admin port's audience (see Auth). The file is read
// again as the kubelet rotates the token (client-go's cached file token source, at most a minute
// old). It fails when file cannot be read now.
func TokenTransport(file string, rt http.RoundTripper) (http.RoundTripper, error) {
	t, err := transport.NewBearerAuthWithRefreshRoundTripper("", file, rt)
	if err != nil {
		return nil, fmt.Errorf("reading the admin token %s: %w", file, err)
	}
	return t, nil
}
