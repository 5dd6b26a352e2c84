package routing

import "testing"

// In Serve mode an in-cluster caller's request reaches an interceptor with whatever Host it used for
// the app's Service; each form must find the app, with or without a port, and must not take another
// namespace's Service of the same name.
func TestServiceHostsMatchEveryInClusterForm(t *testing.T) {
	shop := entry("shop/shop", append([]string{"shop.example.com"}, ServiceHosts("shop", "shop", "cluster.local", []string{"10.96.3.4", "fd00::4"})...))
	other := entry("other/shop", ServiceHosts("shop", "other", "cluster.local", []string{"10.96.7.7"}))
	table := mustTable(t, shop, other)
	for host, want := range map[string]string{
		"shop.example.com":                 "shop/shop",
		"shop.shop":                        "shop/shop",
		"shop.shop:80":                     "shop/shop",
		"shop.shop.svc":                    "shop/shop",
		"shop.shop.svc:80":                 "shop/shop",
		"shop.shop.svc.cluster.local":      "shop/shop",
		"shop.shop.svc.cluster.local.":     "shop/shop",
		"Shop.Shop.SVC.cluster.local:8080": "shop/shop",
		"10.96.3.4":                        "shop/shop",
		"10.96.3.4:8080":                   "shop/shop",
		"shop.other.svc:80":                "other/shop",
		"10.96.7.7:80":                     "other/shop",
		"shop.shop.svc.other.local":        "", // another cluster domain
		"[fd00::4]:80":                     "", // IPv6 literals match only "*" routes
		"10.96.3.5":                        "",
	} {
		e, ok := table.Match(host, "/", nil)
		got := ""
		if ok {
			got = e.Namespace + "/" + e.Name
		}
		if got != want {
			t.Errorf("Host %q routed to %q, want %q", host, got, want)
		}
	}
}

func TestServiceHostsSkipNoneAndIPv6(t *testing.T) {
	// Two namespaces' Services of one name never claim the same host.
	if c := Conflicts([]Entry{
		entry("a/shop", ServiceHosts("shop", "a", "cluster.local", nil)),
		entry("b/shop", ServiceHosts("shop", "b", "cluster.local", nil)),
	}); len(c) != 0 {
		t.Errorf("conflicts between namespaces: %v", c)
	}

	got := ServiceHosts("a", "b", "", []string{"None", "fd00::1", ""})
	want := []string{"a.b", "a.b.svc"}
	if len(got) != len(want) {
		t.Fatalf("ServiceHosts = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ServiceHosts = %v, want %v", got, want)
		}
	}
}
