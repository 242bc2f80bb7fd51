package kafka

import (
	"reflect"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// unsupportedVersionResponse answers a request of a key we serve at a
// version we do not (decoded by kmsg, which knows every version): a
// response of the request's own version in which every error code is
// UNSUPPORTED_VERSION, naming the request's topics, partitions, groups and
// resources back. A client then reports a clear error for exactly what it
// asked, instead of a dropped connection it would retry forever.
func unsupportedVersionResponse(req kmsg.Request) kmsg.Response {
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	mirrorWithError(reflect.ValueOf(req).Elem(), reflect.ValueOf(resp).Elem(), kerr.UnsupportedVersion.Code)
	return resp
}

// mirrorWithError fills the response struct out from the request struct
// in: every int16 field named ErrorCode gets code, a string or int32
// field (a topic or group name, a resource type) or an int32 partition field is copied from the request's
// field of the same name and type, and a slice of structs is built with
// one element per element of the request's slice of the same name. Fields
// of other versions are filled too; encoding ignores them.
func mirrorWithError(in, out reflect.Value, code int16) {
	for i := range out.NumField() {
		f := out.Type().Field(i)
		dst := out.Field(i)
		if !f.IsExported() || !dst.CanSet() {
			continue
		}
		if f.Name == "ErrorCode" && dst.Kind() == reflect.Int16 {
			dst.SetInt(int64(code))
			continue
		}
		if !in.IsValid() {
			continue
		}
		src := in.FieldByName(f.Name)
		if !src.IsValid() {
			continue
		}
		switch {
		case dst.Kind() == reflect.Slice && dst.Type().Elem().Kind() == reflect.Struct &&
			src.Kind() == reflect.Slice && src.Type().Elem().Kind() == reflect.Struct:
			s := reflect.MakeSlice(dst.Type(), src.Len(), src.Len())
			for j := range src.Len() {
				mirrorWithError(src.Index(j), s.Index(j), code)
			}
			dst.Set(s)
		case src.Type() == dst.Type() && (dst.Kind() == reflect.String || dst.Kind() == reflect.Int8 ||
			(dst.Kind() == reflect.Int32 && strings.Contains(f.Name, "Partition")) ||
			(dst.Kind() == reflect.Pointer && dst.Type().Elem().Kind() == reflect.String)):
			dst.Set(src)
		}
	}
}
