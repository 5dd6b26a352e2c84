// Package controller reconciles HTTPScaledObjects into routing-table entries, KEDA ScaledObjects and a
// status that proves routing propagation to every interceptor.
package controller
