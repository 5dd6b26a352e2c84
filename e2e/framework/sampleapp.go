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

// SampleApp returns a Deployment and Service for the sample app: pods labelled app=<name>, spread
// evenly over the zones, answering on the cluster's sample-app port; the Service's port 80 targets it.
func (f *Framework) SampleApp(ns, name string, replicas int32) (*appsv1.Deployment, *corev1.Service) {
	labels := map[string]string{"app": name}
	port := int32(f.Cluster.SampleAppPort)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "app", Image: "httpscale.dev/sampleapp:local",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}},
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
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(port)}},
		},
	}
	return dep, svc
}
