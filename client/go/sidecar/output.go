package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"

	pb "github.com/cleveragents/cleveragents-sidecar/client/go/toolruntimev1"
)

// ErrNoOutput is the error DecodeOutput wraps when a run ended without a valid structured
// answer: it had no output schema, the model refused, or its answers did not validate within
// max_output_retries (the result's StopReason and OutputError say which).
var ErrNoOutput = errors.New("the run has no structured answer")

// DecodeOutput unmarshals a run's structured answer (result.Output, the JSON text the sidecar
// validated against RunSpec.OutputSchema) into v, as json.Unmarshal does. The schema is the
// caller's own JSON Schema text: this client derives none from Go types, since no maintained
// schema generator is packaged offline (Debian's golang-github-alecthomas-jsonschema-dev is
// archived upstream, succeeded by invopop/jsonschema, which Debian does not package).
func DecodeOutput(result *pb.ToolCallRunResult, v any) error {
	if result.GetOutput() == "" {
		why := result.GetStopReason().String()
		if result.GetOutputError() != "" {
			why += ": " + result.GetOutputError()
		}
		return fmt.Errorf("%w (%s)", ErrNoOutput, why)
	}
	return json.Unmarshal([]byte(result.GetOutput()), v)
}
