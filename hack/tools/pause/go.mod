// The sandbox ("pause") process of the local cluster's real nodes, built by hack/tools.sh node.
module github.com/httpscale/httpscale/hack/tools/pause

go 1.26.0
