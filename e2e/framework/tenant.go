package framework

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Tenant returns a client that acts as a tenant of namespace ns: a ServiceAccount "tenant" bound by a
// Role in ns to what a team deploying apps there may do (HTTPScaledObjects, Services, Deployments,
// Secrets, ConfigMaps; reading events and pods), and nothing outside ns. Its token comes from
// `kubectl create token`, as a person's or a CI job's would.
func (f *Framework) Tenant(ctx context.Context, ns string) (client.Client, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"httpscale.dev"}, Resources: []string{"httpscaledobjects"}, Verbs: []string{"*"}},
		{APIGroups: []string{"httpscale.dev"}, Resources: []string{"httpscaledobjects/status"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"services", "secrets", "configmaps"}, Verbs: []string{"*"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"get", "list", "watch"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}
	for _, o := range []client.Object{sa, role, binding} {
		if err := f.Client.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("creating tenant %T in %s: %w", o, ns, err)
		}
	}
	token, err := f.Cluster.KubectlRun(ctx, "", "-n", ns, "create", "token", sa.Name, "--duration=2h")
	if err != nil {
		return nil, fmt.Errorf("creating a token for tenant %s: %w", ns, err)
	}
	cfg := rest.CopyConfig(f.RESTConfig)
	cfg.BearerToken = strings.TrimSpace(token)
	return client.New(cfg, client.Options{Scheme: f.Client.Scheme()})
}
