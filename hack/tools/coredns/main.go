// Command coredns builds CoreDNS from the Go module proxy with only the plugins the local cluster's
// DNS needs: the kubernetes plugin answers for cluster.local from the API, nothing forwards upstream.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins compiled in; a Corefile naming any other plugin fails to load.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The server plugin order stays CoreDNS's own (dnsserver.Directives); plugins that are not compiled in
// are skipped.
var _ = dnsserver.Directives

func main() { coremain.Run() }
