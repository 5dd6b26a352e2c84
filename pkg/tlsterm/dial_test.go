package tlsterm_test

import (
	"net"
	"time"
)

var netDialer = net.Dialer{Timeout: 5 * time.Second}
