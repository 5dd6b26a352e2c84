package h1

import "testing"

// FuzzBareLFFrom: searched from any point before which b holds no bare LF (as the event loops
// search a head that arrives in pieces), BareLFFrom answers what BareLF answers for the whole of b.
func FuzzBareLFFrom(f *testing.F) {
	for _, s := range []string{"GET / HTTP/1.1\r\nHost: a\r\n", "GET / HTTP/1.1\r\nHost: a\nX: b", "\n", "\r", "\r\n", "a\r\n\n", "ab\r", "\r\n\r\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		whole := BareLF(b)
		for from := 0; from <= len(b); from++ {
			if BareLF(b[:from]) {
				break // the loops hand the connection over at the first bare LF
			}
			if got := BareLFFrom(b, from); got != whole {
				t.Fatalf("BareLFFrom(%q, %d) = %v, BareLF = %v", b, from, got, whole)
			}
		}
	})
}

// FuzzFieldValue: FieldValue, eight bytes at a time, answers what a check of each byte answers.
func FuzzFieldValue(f *testing.F) {
	for _, s := range []string{"", "abc", "a\tb", "0123456789abcdef\x7f", "0123456\x1f89", "\x80\x9f\xff\x7e\x20\x21\x00", "\xa0\xa0\xa0\xa0\xa0\xa0\xa0\x1f", "aaaaaaa\x7faaaaaaaa"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := true
		for _, c := range b {
			if c < ' ' && c != '\t' || c == 0x7f {
				want = false
			}
		}
		if got := FieldValue(b); got != want {
			t.Fatalf("FieldValue(%q) = %v, want %v", b, got, want)
		}
		if got := FieldValue(string(b)); got != want {
			t.Fatalf("FieldValue(string %q) = %v, want %v", b, got, want)
		}
	})
}
