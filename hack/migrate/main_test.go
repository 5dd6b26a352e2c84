package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

const fixtures = "../../pkg/migrate/testdata/peer"

func TestRun(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run([]string{"-f", filepath.Join(fixtures, "legacy.yaml"), "-skip-scaledobject"}, nil, &out, &errOut); err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, want := range []string{"apiVersion: httpscale.dev/v1alpha1", "httpscale.dev/skip-scaledobject: \"true\"", "- legacy.example.com"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errOut.String(), "warning: default/legacy: spec.scaleTargetRef.deployment: written as scaleTargetRef.name") {
		t.Errorf("warnings on stderr: %q", errOut.String())
	}
}

func TestRunStdinAndStrict(t *testing.T) {
	in := "apiVersion: http.keda.sh/v1alpha1\nkind: HTTPScaledObject\nmetadata: {name: a}\n" +
		"spec: {hosts: [a.example.com], scaleTargetRef: {name: a, service: a, port: 80}, initialCooldownPeriod: 5}\n"
	var out, errOut bytes.Buffer
	if err := run(nil, strings.NewReader(in), &out, &errOut); err != nil {
		t.Fatalf("without -strict: %v", err)
	}
	out.Reset()
	errOut.Reset()
	if err := run([]string{"-strict"}, strings.NewReader(in), &out, &errOut); !errors.Is(err, errStrict) {
		t.Fatalf("with -strict: want errStrict, got %v", err)
	}
	if !strings.Contains(errOut.String(), "spec.initialCooldownPeriod: no equivalent") {
		t.Errorf("stderr: %q", errOut.String())
	}
}

func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		in   string
		want string
	}{
		{[]string{"file.yaml"}, "", `unexpected arguments ["file.yaml"]: give the input with -f FILE`},
		{[]string{"-f", "does-not-exist.yaml"}, "", "opening input"},
		{nil, "apiVersion: http.keda.sh/v1alpha1\nkind: HTTPScaledObject\nmetadata: {name: a, namespace: ns}\nspec: {hosts: [a]}\n",
			"converting ns/a: spec.scaleTargetRef: Required value"},
	} {
		var out, errOut bytes.Buffer
		err := run(tc.args, strings.NewReader(tc.in), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q): want error containing %q, got %v", tc.args, tc.want, err)
		}
	}
}
