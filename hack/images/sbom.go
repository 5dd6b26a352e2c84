package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// SBOM returns the CycloneDX 1.6 software bill of materials of one component's image for one platform,
// as JSON: the binary (the image's only software; the rest of the image is /etc/passwd, /etc/group and
// empty folders) and every Go module and the Go standard library linked into it, read from the binary's
// own build information, so the list is what was compiled, not what go.mod allows. The serial number
// and timestamp derive from the inputs, so one build's SBOM is byte-for-byte reproducible.
func SBOM(component string, binary []byte, platform v1.Platform, m Meta, imageDigest v1.Hash) ([]byte, error) {
	bi, err := buildinfo.Read(bytes.NewReader(binary))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the binary's build information: %w", component, platform, err)
	}
	sum := sha256.Sum256(binary)
	main := cdx.Component{
		BOMRef:      "pkg:oci/" + component + "@" + imageDigest.String(),
		Type:        cdx.ComponentTypeContainer,
		Name:        component,
		Version:     m.Version,
		Description: "httpscale " + component + " image for " + platform.String(),
		PackageURL:  fmt.Sprintf("pkg:oci/%s@%s?arch=%s", component, imageDigest, platform.Architecture),
		Properties: &[]cdx.Property{
			{Name: "org.opencontainers.image.revision", Value: m.Commit},
			{Name: "org.opencontainers.image.source", Value: m.Source},
		},
	}
	stdlib := goComponent("stdlib", strings.TrimPrefix(bi.GoVersion, "go"), "")
	bin := cdx.Component{
		BOMRef:     "file:/" + binDir + "/" + component,
		Type:       cdx.ComponentTypeApplication,
		Name:       "/" + binDir + "/" + component,
		Version:    m.Version,
		PackageURL: "pkg:golang/" + bi.Main.Path + "@" + m.Version + "?type=module",
		Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: fmt.Sprintf("%x", sum)}},
		Properties: buildSettings(bi),
	}
	components := []cdx.Component{bin, stdlib}
	binDeps := []string{stdlib.BOMRef}
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		c := goComponent(d.Path, d.Version, d.Sum)
		components = append(components, c)
		binDeps = append(binDeps, c.BOMRef)
	}
	slices.SortStableFunc(components[2:], func(a, b cdx.Component) int { return strings.Compare(a.BOMRef, b.BOMRef) })
	slices.Sort(binDeps[1:])

	bom := cdx.NewBOM()
	bom.SerialNumber = serial(component, platform, imageDigest, m)
	bom.Metadata = &cdx.Metadata{
		Timestamp: m.Created.UTC().Format(time.RFC3339),
		Component: &main,
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication, Name: "httpscale hack/images",
			Description: "reads the Go build information of each binary with debug/buildinfo",
		}}},
	}
	bom.Components = &components
	bom.Dependencies = &[]cdx.Dependency{
		{Ref: main.BOMRef, Dependencies: &[]string{bin.BOMRef}},
		{Ref: bin.BOMRef, Dependencies: &binDeps},
	}
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, fmt.Errorf("%s %s: encoding the SBOM: %w", component, platform, err)
	}
	return buf.Bytes(), nil
}

// goComponent is a Go module (or the standard library) as a CycloneDX library with its package URL and,
// when known, the go.sum hash of its content.
func goComponent(path, version, sum string) cdx.Component {
	purl := "pkg:golang/" + path + "@" + version + "?type=module"
	c := cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: path, Version: version, PackageURL: purl}
	if sum != "" {
		c.Properties = &[]cdx.Property{{Name: "go.sum", Value: sum}}
	}
	return c
}

// buildSettings are the compiler settings the binary records (GOOS, GOARCH, CGO_ENABLED, -trimpath,
// -ldflags, ...), so a reader can rebuild it.
func buildSettings(bi *debug.BuildInfo) *[]cdx.Property {
	props := []cdx.Property{{Name: "go.version", Value: bi.GoVersion}}
	for _, s := range bi.Settings {
		props = append(props, cdx.Property{Name: "go.build." + s.Key, Value: s.Value})
	}
	return &props
}

// serial is a UUID (version 5 layout) derived from everything the SBOM describes, so the same build
// gets the same serial number and a different one a different number.
func serial(component string, p v1.Platform, d v1.Hash, m Meta) string {
	h := sha256.Sum256([]byte(strings.Join([]string{component, p.String(), d.String(), m.Version, m.Commit}, "\n")))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// readSBOM decodes an SBOM file (tests, and the release's self-check).
func readSBOM(path string) (*cdx.BOM, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bom := &cdx.BOM{}
	if err := cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(bom); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return bom, nil
}
