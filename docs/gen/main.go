// Command gen writes the generated reference pages of docs/ (run by `go generate ./docs`, in
// that folder): steps.md and pipeline-reference.md.
package main

import (
	"log"
	"os"

	"github.com/prflow/prflow/docs"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
)

func main() {
	ref, err := docs.PipelineReference(pipelines.Schema)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("pipeline-reference.md", ref, 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("steps.md", docs.StepReference(steps.Default), 0o644); err != nil {
		log.Fatal(err)
	}
}
