package routing

import (
	"strings"
	"time"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// EntryFromSpec turns an HTTPScaledObject and its resolved backends into the Entry the interceptors
// route with. It copies the routing fields (hosts, path prefixes, headers, ignored paths, static
// routes, timeouts, cold start, forwarding, path rewrites, session persistence) and shares no memory
// with hso. Durations are expected to
// be valid (the API server validated them); an unparsable one is left zero, which means the
// interceptor's default. The result is not validated: NewTable does that.
func EntryFromSpec(hso *v1.HTTPScaledObject, target Backend, fallback *Backend) Entry {
	e := Entry{
		Namespace:  hso.Namespace,
		Name:       hso.Name,
		Generation: hso.Generation,
		Service:    target.Service,
		Port:       target.Port,
		PortName:   target.PortName,
		TargetPort: target.TargetPort,
		Protocol:   target.Protocol,
		ClusterIP:  target.ClusterIP,
	}
	for _, h := range hso.Spec.Hosts {
		e.Hosts = append(e.Hosts, string(h))
	}
	for _, p := range hso.Spec.PathPrefixes {
		e.PathPrefixes = append(e.PathPrefixes, string(p))
	}
	for _, h := range hso.Spec.Headers {
		e.Headers = append(e.Headers, HeaderMatch{Name: h.Name, Value: clonePtr(h.Value)})
	}
	for _, p := range hso.Spec.IgnoredPaths {
		e.Ignored = append(e.Ignored, string(p))
	}
	for _, sr := range hso.Spec.StaticRoutes {
		r := StaticRoute{PathPrefix: string(sr.PathPrefix)}
		if resp := sr.Response; resp != nil {
			code := resp.StatusCode
			if code == 0 {
				code = 200 // the API's default, for objects read without defaulting
			}
			r.Response = (&Placeholder{StatusCode: code, Headers: resp.Headers, Body: resp.Body}).clone()
		}
		if svc := sr.Service; svc != nil {
			r.Backend = &Backend{Service: svc.Name, Port: svc.Port, Protocol: ProtocolHTTP}
		}
		e.Static = append(e.Static, r)
	}
	if t := hso.Spec.Timeouts; t != nil {
		e.Timeouts = Timeouts{
			Readiness:      t.Readiness.Parsed(),
			Request:        t.Request.Parsed(),
			ResponseHeader: t.ResponseHeader.Parsed(),
		}
	}
	if cs := hso.Spec.ColdStart; cs != nil {
		if cs.QueueLimit != nil {
			e.ColdStart.QueueLimit = *cs.QueueLimit
		}
		e.ColdStart.Fallback = clonePtr(fallback)
		if p := cs.Placeholder; p != nil {
			e.ColdStart.Placeholder = &Placeholder{StatusCode: p.StatusCode, Headers: p.Headers, Body: p.Body}
		}
		if w := cs.WaitingPage; w != nil && w.Enabled {
			e.ColdStart.WaitingPage = &WaitingPage{Refresh: w.RefreshSeconds, HTML: w.HTML}
		}
		e.ColdStart.Probe = probeFromSpec(cs.Probe)
	}
	if t := hso.Spec.TLS; t != nil {
		e.TLSSecret = t.SecretName
	}
	if f := hso.Spec.Forwarding; f != nil {
		e.ZoneAware = clonePtr(f.ZoneAware)
		e.ViaService = f.ViaService
	}
	for _, rw := range hso.Spec.PathRewrites {
		e.Rewrites = append(e.Rewrites, PathRewrite{Prefix: string(rw.PathPrefix), Replace: rw.ReplacePrefixMatch})
	}
	if sp := hso.Spec.SessionPersistence; sp != nil {
		e.Session = &Session{Cookie: sp.SessionCookieName(), MaxAge: int64(sp.Lifetime.Parsed() / time.Second)}
	}
	return e
}

// ServiceHosts returns the Host header values by which in-cluster callers reach a Service:
// name.namespace, name.namespace.svc and name.namespace.svc.<clusterDomain>, then its IPv4 cluster
// IPs (an IPv6 Host is an IP literal, which only "*" routes match). Serve mode adds them to the app's
// routing entry so that a request sent to the app's Service and redirected to an interceptor finds the
// app; a :port in the Host is ignored by the match. Headless Services ("None") have no cluster IP.
//
// The bare name is left out: Services of the same name in two namespaces would claim the same host,
// and a routing conflict takes the later object out of the table as a whole.
func ServiceHosts(service, namespace, clusterDomain string, clusterIPs []string) []string {
	hosts := []string{service + "." + namespace, service + "." + namespace + ".svc"}
	if clusterDomain != "" {
		hosts = append(hosts, service+"."+namespace+".svc."+clusterDomain)
	}
	for _, ip := range clusterIPs {
		if ip != "" && ip != "None" && !strings.Contains(ip, ":") {
			hosts = append(hosts, ip)
		}
	}
	return hosts
}

// probeFromSpec returns the routing form of a cold-start probe; nil (the pods' own readiness probes)
// for none or one that sets nothing.
func probeFromSpec(p *v1.ColdStartProbe) *Probe {
	switch {
	case p == nil:
		return nil
	case p.Disabled:
		return &Probe{Off: true}
	case p.HTTPGet != nil:
		path := p.HTTPGet.Path
		if path == "" {
			path = "/" // the API's default, for objects read without defaulting
		}
		return &Probe{Port: p.HTTPGet.Port, Path: path}
	case p.TCPSocket != nil:
		return &Probe{TCP: true, Port: p.TCPSocket.Port}
	}
	return nil
}
