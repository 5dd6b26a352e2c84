package charts_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestImagesRunLocked checks the chart against the images `make images` builds (hack/images): the
// default references are ghcr.io/httpscale/<component>:<appVersion>, which `make images-push` writes with
// its defaults; the image's entrypoint is the binary (no command), its user is 65532 (runAsNonRoot
// without runAsUser); and with the root filesystem read-only and every capability dropped, each path a
// binary writes or reads from a mount is a volume: /tmp (an emptyDir) for every component, and the
// operator's webhook certificate directory (--webhook-cert-dir) - cert-manager's Secret when it issues
// the certificate, else inside /tmp (self-managed certificates are served from memory).
func TestImagesRunLocked(t *testing.T) {
	chart, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chart, &meta); err != nil || meta.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion %q: %v", meta.AppVersion, err)
	}

	for name, args := range map[string][]string{
		"self-managed certificates": nil,
		"cert-manager":              {"--set", "certManager.enabled=true"},
		"webhook off":               {"--set", "webhook.enabled=false"},
	} {
		t.Run(name, func(t *testing.T) {
			m := render(t, "httpscale-system", args...)
			for _, component := range []string{"operator", "interceptor", "scaler"} {
				d := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-"+component)
				c := container(t, d, component)
				if want := "ghcr.io/httpscale/" + component + ":" + meta.AppVersion; c.Image != want {
					t.Errorf("%s image = %s, want %s", component, c.Image, want)
				}
				if len(c.Command) != 0 {
					t.Errorf("%s command = %v; the image's entrypoint is the binary", component, c.Command)
				}
				checkLocked(t, d, c)
				writable := map[string]string{"/tmp": "emptyDir"}
				if component == "operator" {
					if dir, ok := argValue(c, "--webhook-cert-dir"); ok {
						writable[dir] = "secret"
					} else if !hasArg(c, "--webhook-bind-address=0") && !hasArg(c, "--webhook-self-managed-certs=true") {
						t.Errorf("operator args %v: a webhook without self-managed certificates and without --webhook-cert-dir", c.Args)
					} else {
						writable["/tmp/k8s-webhook-server/serving-certs"] = "emptyDir" // the flag's default
					}
				}
				for path, kind := range writable {
					if got := volumeKindAt(t, d, c, path); got != kind {
						t.Errorf("%s: %s is on %q, want a %s volume", component, path, got, kind)
					}
				}
			}
		})
	}
}

// checkLocked asserts the pod cannot run as root and the container cannot write its image or gain
// privileges.
func checkLocked(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
	t.Helper()
	pod := d.Spec.Template.Spec.SecurityContext
	if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || (pod.RunAsUser != nil && *pod.RunAsUser == 0) {
		t.Errorf("%s pod security context %+v: want runAsNonRoot and no root user", d.Name, pod)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) != 0 {
		t.Errorf("%s container security context %+v: want a read-only root, no privilege escalation, every capability dropped", d.Name, sc)
	}
}

func argValue(c corev1.Container, flag string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

// volumeKindAt returns the kind of volume ("emptyDir", "secret", ...) mounted deepest above path, or
// "root filesystem" when no mount covers it.
func volumeKindAt(t *testing.T, d *appsv1.Deployment, c corev1.Container, path string) string {
	t.Helper()
	var best *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		p := strings.TrimSuffix(vm.MountPath, "/")
		if (path == p || strings.HasPrefix(path, p+"/")) && (best == nil || len(p) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	if best == nil {
		return "root filesystem"
	}
	v := volume(t, d, best.Name)
	switch {
	case v.EmptyDir != nil:
		if best.ReadOnly {
			return "read-only emptyDir"
		}
		return "emptyDir"
	case v.Secret != nil:
		return "secret"
	}
	return "other volume " + v.Name
}
