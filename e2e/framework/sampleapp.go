package framework

import (
	"context"
	"fmt"
	"math/rand/v2"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// CreateNamespace creates a namespace named prefix-<random>.
func (f *Framework) CreateNamespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", prefix, rand.IntN(100000))}}
	if err := f.Client.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("creating namespace: %w", err)
	}
	return ns.Name, nil
}

// DeleteNamespace deletes a namespace (without waiting).
func (f *Framework) DeleteNamespace(ctx context.Context, name string) error {
	return f.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// Ports of the sample app's pods: the app itself and its admin port (GET /requests: the requests this
// pod saw, counted per ?rid=).
const (
	SampleAppPort  = 8000
	SampleAppAdmin = 8001
)

// SampleApp returns a Deployment and Service for the sample app: real pods of the sample app's image on
// the real nodes, labelled app=<name>, spread evenly over the zones, Ready through an HTTP readiness
// probe; the Service's port 80 targets the app's port. The pods report their zone (from their IP).
func (f *Framework) SampleApp(ns, name string, replicas int32) (*appsv1.Deployment, *corev1.Service) {
	labels := map[string]string{"app": name}
	args := []string{fmt.Sprintf("--listen=0.0.0.0:%d", SampleAppPort), fmt.Sprintf("--admin=0.0.0.0:%d", SampleAppAdmin)}
	for _, n := range f.Cluster.Real {
		args = append(args, "--zone="+n.PodCIDR+"="+n.Zone)
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  RealNodeSelector(),
					TerminationGracePeriodSeconds: ptr.To[int64](2),
					Containers: []corev1.Container{{
						Name: "app", Image: f.Cluster.SampleAppImage(), Args: args,
						Ports: []corev1.ContainerPort{
							{Name: "http", ContainerPort: SampleAppPort},
							{Name: "admin", ContainerPort: SampleAppAdmin},
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
							PeriodSeconds: 1,
						},
					}},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone",
						WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: labels},
					}},
				},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(SampleAppPort)}},
		},
	}
	return dep, svc
}

// RealNodeSelector selects the real nodes (the cluster also has kwok's fake nodes, where no container
// runs); add to it, never replace it.
func RealNodeSelector() map[string]string { return map[string]string{"type": "real"} }
