// Command coredns builds CoreDNS from the Go module proxy with only the plugins the local cluster's
// DNS needs: the kubernetes plugin answers for cluster.local from the API, nothing forwards upstream.
// The server keeps CoreDNS's own plugin order (dnsserver.Directives); plugins not imported here are
// not compiled in, and a Corefile naming one fails to load.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

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

func main() { coremain.Run() }
