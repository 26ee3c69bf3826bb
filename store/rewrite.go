package store

import (
	"errors"
	"fmt"
	"os"

	bolt "go.etcd.io/bbolt"
)

// Rewriting: a copy of a run.db whose values pass through a function (a
// redacted copy to share, docs/run-db.md). The source is opened read-only
// through Open, so only a forensic run of a known schema is copied, and
// it is never written. Buckets are top-level and hold no nested buckets.

// Value is one stored value: its bucket, key and bytes. The slices are
// valid only during the call they are passed to.
type Value struct {
	Bucket string
	Key    []byte
	Val    []byte
}

// Each calls fn for every value of every bucket of r, bucket by bucket
// in name order, keys in order.
func (r *Reader) Each(fn func(v Value) error) error {
	return r.view(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if v == nil {
					return fmt.Errorf("%w: nested bucket %q in %q", ErrCorrupt, k, name)
				}
				return fn(Value{Bucket: string(name), Key: k, Val: v})
			})
		})
	})
}

// RewriteFunc returns what a value becomes in the copy: its new bytes, or
// keep false to leave it out.
type RewriteFunc func(v Value) (out []byte, keep bool, err error)

// Rewrite writes a new file dst (mode 0600; an existing file is refused)
// holding every bucket of r with each value passed through fn, then the
// extra values (their buckets made when missing); a bucket keeps its
// sequence, so appending to the copy goes on after its records. On an
// error dst is removed.
func (r *Reader) Rewrite(dst string, fn RewriteFunc, extra ...Value) (err error) {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	defer func() {
		if err != nil {
			os.Remove(dst)
		}
	}()
	out, err := bolt.Open(dst, 0o600, &bolt.Options{Timeout: LockWait})
	if err != nil {
		return err
	}
	err = r.view(func(src *bolt.Tx) error {
		return src.ForEach(func(name []byte, b *bolt.Bucket) error {
			return copyBucket(out, name, b, fn)
		})
	})
	if err == nil && len(extra) > 0 {
		err = out.Update(func(tx *bolt.Tx) error {
			for _, v := range extra {
				b, err := tx.CreateBucketIfNotExists([]byte(v.Bucket))
				if err == nil {
					err = b.Put(v.Key, v.Val)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	return errors.Join(err, out.Close())
}

// rewriteBatch is how many values one write transaction of the copy
// holds, so a large file is not copied in one transaction's memory.
const rewriteBatch = 20000

// copyBucket copies one bucket through fn, in transactions of
// rewriteBatch values.
func copyBucket(out *bolt.DB, name []byte, b *bolt.Bucket, fn RewriteFunc) error {
	err := out.Update(func(tx *bolt.Tx) error {
		nb, err := tx.CreateBucket(name)
		if err == nil {
			err = nb.SetSequence(b.Sequence())
		}
		return err
	})
	if err != nil {
		return err
	}
	c := b.Cursor()
	k, v := c.First()
	for k != nil {
		err := out.Update(func(tx *bolt.Tx) error {
			nb := tx.Bucket(name)
			for n := 0; k != nil && n < rewriteBatch; n++ {
				if v == nil {
					return fmt.Errorf("%w: nested bucket %q in %q", ErrCorrupt, k, name)
				}
				val, keep, err := fn(Value{Bucket: string(name), Key: k, Val: v})
				if err != nil {
					return err
				}
				if keep {
					if err := nb.Put(append([]byte(nil), k...), append([]byte(nil), val...)); err != nil {
						return err
					}
				}
				k, v = c.Next()
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
