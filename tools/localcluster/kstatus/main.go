// kstatus prints what sigs.k8s.io/cli-utils' kstatus (the library Flux's health checks use) computes for
// Kubernetes objects, so the tests check the operator's status against kstatus itself, not a copy of its
// rules.
//
//	kubectl get trainingjobs -o json | kstatus
//
// stdin: one object, or a List of them (kubectl's -o json). stdout: one JSON line per object,
//
//	{"namespace": "...", "name": "...", "status": "InProgress", "message": "..."}
//
// with status one of kstatus' InProgress, Failed, Current, Terminating, NotFound, Unknown.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	Message   string `json:"message"`
}

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	var obj unstructured.Unstructured
	if err := obj.UnmarshalJSON(raw); err != nil {
		fail(err)
	}
	items := []unstructured.Unstructured{obj}
	if obj.IsList() {
		list, err := obj.ToList()
		if err != nil {
			fail(err)
		}
		items = list.Items
	}
	out := json.NewEncoder(os.Stdout)
	for i := range items {
		res, err := status.Compute(&items[i])
		if err != nil {
			fail(err)
		}
		if err := out.Encode(verdict{items[i].GetNamespace(), items[i].GetName(), res.Status.String(), res.Message}); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kstatus:", err)
	os.Exit(1)
}
