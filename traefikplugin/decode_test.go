package traefikplugin

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// decodeLikeTraefik decodes m into the struct out points to the way Traefik
// decodes a plugin's configuration: mapstructure with WeaklyTypedInput and
// StringToSliceHookFunc(","), option names matched in any letter case,
// the options no field names collected in the field tagged
// `mapstructure:",remain"`. It covers the kinds Config uses: strings (from
// strings, numbers and booleans, a boolean becoming "1" or "0" as
// mapstructure writes it), string lists (from a list or one
// comma-separated string), pointers to structs and lists of structs (from
// maps).
func decodeLikeTraefik(m map[string]interface{}, out interface{}) error {
	return decodeStruct("", m, reflect.ValueOf(out).Elem())
}

func decodeStruct(path string, m map[string]interface{}, v reflect.Value) error {
	t := v.Type()
	remain := -1
	for i := 0; i < t.NumField(); i++ {
		if strings.HasSuffix(t.Field(i).Tag.Get("mapstructure"), ",remain") {
			remain = i
		}
	}
	for k, raw := range m {
		known := false
		for i := 0; i < t.NumField(); i++ {
			if i == remain || !strings.EqualFold(t.Field(i).Name, k) {
				continue
			}
			known = true
			if err := decodeValue(path+k, raw, v.Field(i)); err != nil {
				return err
			}
		}
		if !known && remain >= 0 {
			f := v.Field(remain)
			if f.IsNil() {
				f.Set(reflect.ValueOf(map[string]interface{}{}))
			}
			f.SetMapIndex(reflect.ValueOf(k), reflect.ValueOf(raw))
		}
	}
	return nil
}

func decodeValue(path string, raw interface{}, v reflect.Value) error {
	switch v.Kind() {
	case reflect.String:
		s, err := weakString(path, raw)
		if err != nil {
			return err
		}
		v.SetString(s)
	case reflect.Ptr:
		m, ok := raw.(map[string]interface{})
		if !ok {
			return fmt.Errorf("%s: want a map, got %T", path, raw)
		}
		p := reflect.New(v.Type().Elem())
		if err := decodeStruct(path+".", m, p.Elem()); err != nil {
			return err
		}
		v.Set(p)
	case reflect.Slice:
		var items []interface{}
		switch x := raw.(type) {
		case string:
			if x != "" {
				for _, s := range strings.Split(x, ",") {
					items = append(items, s)
				}
			}
		case []interface{}:
			items = x
		case []string:
			for _, s := range x {
				items = append(items, s)
			}
		default:
			items = []interface{}{raw} // mapstructure: a single value becomes a list
		}
		sl := reflect.MakeSlice(v.Type(), len(items), len(items))
		for i, item := range items {
			p := path + "[" + strconv.Itoa(i) + "]"
			el := sl.Index(i)
			if el.Kind() == reflect.Struct {
				m, ok := item.(map[string]interface{})
				if !ok {
					return fmt.Errorf("%s: want a map, got %T", p, item)
				}
				if err := decodeStruct(p+".", m, el); err != nil {
					return err
				}
				continue
			}
			if err := decodeValue(p, item, el); err != nil {
				return err
			}
		}
		v.Set(sl)
	default:
		return fmt.Errorf("%s: unsupported kind %s", path, v.Kind())
	}
	return nil
}

// weakString converts a scalar as mapstructure's WeaklyTypedInput does for
// a string field.
func weakString(path string, raw interface{}) (string, error) {
	switch x := raw.(type) {
	case string:
		return x, nil
	case bool:
		if x {
			return "1", nil
		}
		return "0", nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("%s: cannot decode %T into a string", path, raw)
}
