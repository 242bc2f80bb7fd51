package tftests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// This file evaluates the module's IAM policy documents offline: the
// statements of a data "aws_iam_policy_document" block, with every
// expression evaluated against stand-in values of what AWS would provide
// (account, partition, resource IDs), so that a test can ask whether a
// given call (action, resource ARN, condition keys) would be allowed.
// It models what the module uses: Allow statements, dynamic statements
// switched by for_each, actions and resources with * and ? wildcards, and
// StringLike/StringEquals/ArnLike conditions (all conditions must hold,
// any value of one may match, an absent key fails it, as in IAM).

// Statement is one evaluated Allow statement.
type Statement struct {
	Sid        string
	Actions    []string
	Resources  []string
	Conditions []Condition
}

// Condition is one condition block of a statement.
type Condition struct {
	Test, Variable string
	Values         []string
}

// Request is one call as IAM evaluates it.
type Request struct {
	Action   string            // e.g. s3:GetObject
	Resource string            // ARN
	Keys     map[string]string // condition keys the request carries (s3:prefix)
	Origin   string            // what made the call, for messages
}

func (r Request) String() string {
	s := r.Action + " on " + r.Resource
	for k, v := range r.Keys {
		s += fmt.Sprintf(" [%s=%q]", k, v)
	}
	return s + " (" + r.Origin + ")"
}

// Allowed returns the Sid of the first statement that allows r, and
// whether one does.
func Allowed(policy []Statement, r Request) (string, bool) {
	for _, st := range policy {
		if matchAny(st.Actions, r.Action, true) && matchAny(st.Resources, r.Resource, false) && conditionsHold(st.Conditions, r.Keys) {
			return st.Sid, true
		}
	}
	return "", false
}

func matchAny(patterns []string, s string, fold bool) bool {
	for _, p := range patterns {
		if fold {
			if glob(strings.ToLower(p), strings.ToLower(s)) {
				return true
			}
		} else if glob(p, s) {
			return true
		}
	}
	return false
}

func conditionsHold(conds []Condition, keys map[string]string) bool {
	for _, c := range conds {
		v, ok := keys[c.Variable]
		if !ok {
			return false
		}
		held := false
		for _, want := range c.Values {
			switch c.Test {
			case "StringLike", "ArnLike":
				held = held || glob(want, v)
			case "StringEquals", "ArnEquals":
				held = held || want == v
			default:
				return false // an operator this model does not know never passes
			}
		}
		if !held {
			return false
		}
	}
	return true
}

// glob matches IAM wildcards: * any run of characters, ? exactly one.
func glob(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := len(s); i >= 0; i-- {
				if glob(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			p, s = p[1:], s[1:]
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
			p, s = p[1:], s[1:]
		}
	}
	return s == ""
}

// Evaluator evaluates a module's expressions against stand-in values.
type Evaluator struct {
	Dir   string
	files []*hclsyntax.Body
	Ctx   *hcl.EvalContext
}

// NewEvaluator parses dir's .tf files and builds the evaluation context:
// var (defaults overridden by vars), the stand-ins given in roots (data,
// resources: "data" -> {...}, "aws_s3_bucket" -> {...}), path.module,
// count.index = index, and every local that evaluates with those.
func NewEvaluator(dir string, vars map[string]cty.Value, roots map[string]cty.Value, index int) (*Evaluator, error) {
	m, err := Load(dir)
	if err != nil {
		return nil, err
	}
	varObj := map[string]cty.Value{}
	for name, v := range m.Variables {
		if v.HasDefault {
			varObj[name] = v.Default
		}
	}
	for k, v := range vars {
		varObj[k] = v
	}
	e := &Evaluator{Dir: dir, Ctx: &hcl.EvalContext{Variables: map[string]cty.Value{
		"var":   cty.ObjectVal(varObj),
		"path":  cty.ObjectVal(map[string]cty.Value{"module": cty.StringVal(dir)}),
		"count": cty.ObjectVal(map[string]cty.Value{"index": cty.NumberIntVal(int64(index))}),
	}, Functions: functions(dir)}}
	for k, v := range roots {
		e.Ctx.Variables[k] = v
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.tf"))
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		file, diags := hclsyntax.ParseConfig(src, f, hcl.InitialPos)
		if diags.HasErrors() {
			return nil, diags
		}
		e.files = append(e.files, file.Body.(*hclsyntax.Body))
	}
	e.evalLocals()
	return e, nil
}

// evalLocals evaluates every local whose references are known, repeating
// until no more can be (locals may refer to each other in any order).
func (e *Evaluator) evalLocals() {
	exprs := map[string]hcl.Expression{}
	for _, body := range e.files {
		for _, b := range body.Blocks {
			if b.Type == "locals" {
				for name, a := range b.Body.Attributes {
					exprs[name] = a.Expr
				}
			}
		}
	}
	locals := map[string]cty.Value{}
	for progress := true; progress; {
		progress = false
		for name, x := range exprs {
			e.Ctx.Variables["local"] = cty.ObjectVal(locals)
			v, diags := x.Value(e.Ctx)
			if diags.HasErrors() || !v.IsWhollyKnown() {
				continue
			}
			locals[name] = v
			delete(exprs, name)
			progress = true
		}
	}
	e.Ctx.Variables["local"] = cty.ObjectVal(locals)
}

// Block finds the block `typ "labels[0]" "labels[1]"`.
func (e *Evaluator) Block(typ string, labels ...string) (*hclsyntax.Block, error) {
	for _, body := range e.files {
		for _, b := range body.Blocks {
			if b.Type == typ && strings.Join(b.Labels, "\x00") == strings.Join(labels, "\x00") {
				return b, nil
			}
		}
	}
	return nil, fmt.Errorf("%s: no %s %q", e.Dir, typ, labels)
}

// Policy evaluates data "aws_iam_policy_document" name.
func (e *Evaluator) Policy(name string) ([]Statement, error) {
	b, err := e.Block("data", "aws_iam_policy_document", name)
	if err != nil {
		return nil, err
	}
	var out []Statement
	for _, sb := range b.Body.Blocks {
		switch {
		case sb.Type == "statement":
			st, err := e.statement(sb.Body)
			if err != nil {
				return nil, err
			}
			out = append(out, st)
		case sb.Type == "dynamic" && len(sb.Labels) == 1 && sb.Labels[0] == "statement":
			fe, ok := sb.Body.Attributes["for_each"]
			if !ok {
				return nil, fmt.Errorf("dynamic statement without for_each")
			}
			v, diags := fe.Expr.Value(e.Ctx)
			if diags.HasErrors() {
				return nil, fmt.Errorf("dynamic statement for_each: %s", diags.Error())
			}
			for _, cb := range sb.Body.Blocks {
				if cb.Type != "content" {
					continue
				}
				for range v.LengthInt() {
					st, err := e.statement(cb.Body)
					if err != nil {
						return nil, err
					}
					out = append(out, st)
				}
			}
		}
	}
	return out, nil
}

func (e *Evaluator) statement(body *hclsyntax.Body) (Statement, error) {
	var st Statement
	if a, ok := body.Attributes["effect"]; ok {
		if v, _ := a.Expr.Value(e.Ctx); v.AsString() != "Allow" {
			return st, fmt.Errorf("statement with effect %s: the model knows Allow only", v.AsString())
		}
	}
	var err error
	if a, ok := body.Attributes["sid"]; ok {
		st.Sid, err = e.String(a.Expr)
		if err != nil {
			return st, err
		}
	}
	if st.Actions, err = e.strings(body, "actions"); err != nil {
		return st, err
	}
	if st.Resources, err = e.strings(body, "resources"); err != nil {
		return st, err
	}
	for _, cb := range body.Blocks {
		if cb.Type != "condition" {
			continue
		}
		var c Condition
		if c.Test, err = e.String(cb.Body.Attributes["test"].Expr); err != nil {
			return st, err
		}
		if c.Variable, err = e.String(cb.Body.Attributes["variable"].Expr); err != nil {
			return st, err
		}
		if c.Values, err = e.strings(cb.Body, "values"); err != nil {
			return st, err
		}
		st.Conditions = append(st.Conditions, c)
	}
	return st, nil
}

func (e *Evaluator) strings(body *hclsyntax.Body, attr string) ([]string, error) {
	a, ok := body.Attributes[attr]
	if !ok {
		return nil, nil
	}
	v, diags := a.Expr.Value(e.Ctx)
	if diags.HasErrors() {
		return nil, fmt.Errorf("%s: %s", attr, diags.Error())
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, el := it.Element()
		out = append(out, el.AsString())
	}
	return out, nil
}

// String evaluates expr to a string.
func (e *Evaluator) String(expr hcl.Expression) (string, error) {
	v, diags := expr.Value(e.Ctx)
	if diags.HasErrors() {
		return "", fmt.Errorf("%s", diags.Error())
	}
	if v.Type() != cty.String {
		return "", fmt.Errorf("%s: not a string", expr.Range())
	}
	return v.AsString(), nil
}

// functions are the Terraform functions the module's expressions use.
func functions(dir string) map[string]function.Function {
	return map[string]function.Function{
		"concat": stdlib.ConcatFunc, "join": stdlib.JoinFunc, "trimprefix": stdlib.TrimPrefixFunc,
		"contains": stdlib.ContainsFunc, "merge": stdlib.MergeFunc, "format": stdlib.FormatFunc,
		"length": stdlib.LengthFunc, "lower": stdlib.LowerFunc, "replace": stdlib.ReplaceFunc,
		"range": stdlib.RangeFunc, "split": stdlib.SplitFunc, "trimsuffix": stdlib.TrimSuffixFunc,
		"upper": stdlib.UpperFunc, "coalesce": stdlib.CoalesceFunc, "element": stdlib.ElementFunc,
		"keys": stdlib.KeysFunc, "values": stdlib.ValuesFunc, "lookup": stdlib.LookupFunc, "distinct": stdlib.DistinctFunc,
		"toset": stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)), "tolist": stdlib.MakeToFunc(cty.List(cty.DynamicPseudoType)),
		"urlencode": function.New(&function.Spec{
			Params: []function.Parameter{{Name: "s", Type: cty.String}}, Type: function.StaticReturnType(cty.String),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				return cty.StringVal(strings.NewReplacer(":", "%3A", "/", "%2F").Replace(args[0].AsString())), nil
			},
		}),
		"file": function.New(&function.Spec{
			Params: []function.Parameter{{Name: "path", Type: cty.String}}, Type: function.StaticReturnType(cty.String),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				b, err := os.ReadFile(args[0].AsString())
				return cty.StringVal(string(b)), err
			},
		}),
	}
}
