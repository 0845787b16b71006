//! Compact binary encoding of values, used inside checksummed containers (log entries,
//! delta files, tablet metadata).
//!
//! A value is a tag byte followed by its payload in little-endian; variable-length
//! values carry a `u32` length. Decoding never panics on bad input: it returns
//! [`CommonError::Decode`].

use crate::error::{CommonError, Result};
use crate::types::Value;

/// Appends `v` to `out`.
pub fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.push(0),
        Value::Bool(b) => {
            out.push(1);
            out.push(*b as u8);
        }
        Value::Int8(x) => {
            out.push(2);
            out.push(*x as u8);
        }
        Value::Int16(x) => {
            out.push(3);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::Int32(x) => {
            out.push(4);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::Int64(x) => {
            out.push(5);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::Float(x) => {
            out.push(6);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::Double(x) => {
            out.push(7);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::Decimal(x) => {
            out.push(8);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::String(s) => {
            out.push(9);
            put_bytes(out, s.as_bytes());
        }
        Value::Binary(b) => {
            out.push(10);
            put_bytes(out, b);
        }
        Value::Date(x) => {
            out.push(11);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::Timestamp(x) => {
            out.push(12);
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
}

/// Appends a length-prefixed byte string.
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len() as u32);
    out.extend_from_slice(b);
}

/// Appends a little-endian `u32`.
pub fn put_u32(out: &mut Vec<u8>, x: u32) {
    out.extend_from_slice(&x.to_le_bytes());
}

/// Appends a little-endian `u64`.
pub fn put_u64(out: &mut Vec<u8>, x: u64) {
    out.extend_from_slice(&x.to_le_bytes());
}

/// Appends `x` as an LEB128 varint: seven bits per byte, low bits first, the high
/// bit set on every byte but the last.
pub fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// Reads a varint written by [`put_varint`] at `*pos` in `buf`, advancing `pos`;
/// `None` if it runs off the end or past 64 bits.
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut x = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        x |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Some(x);
        }
    }
    None
}

/// A cursor over bytes being decoded.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// Starts reading `buf`; `what` names the structure in errors.
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }
    /// Whether everything has been read.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    fn err(&self, detail: &str) -> CommonError {
        CommonError::Decode {
            what: self.what,
            detail: detail.to_string(),
        }
    }
    /// Takes `n` raw bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(self.err("unexpected end of data"));
        }
        let (h, t) = self.buf.split_at(n);
        self.buf = t;
        Ok(h)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    /// Reads a byte.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.arr::<1>()?[0])
    }
    /// Reads a little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    /// Reads a little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    /// Reads a length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// Reads a varint written by [`put_varint`].
    pub fn varint(&mut self) -> Result<u64> {
        let mut pos = 0;
        let x = get_varint(self.buf, &mut pos).ok_or_else(|| self.err("bad varint"))?;
        self.buf = &self.buf[pos..];
        Ok(x)
    }
    /// Reads a length-prefixed UTF-8 string.
    pub fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| self.err("string is not UTF-8"))
    }
    /// Reads a value written by [`put_value`].
    pub fn value(&mut self) -> Result<Value> {
        Ok(match self.u8()? {
            0 => Value::Null,
            1 => Value::Bool(self.u8()? != 0),
            2 => Value::Int8(self.u8()? as i8),
            3 => Value::Int16(i16::from_le_bytes(self.arr()?)),
            4 => Value::Int32(i32::from_le_bytes(self.arr()?)),
            5 => Value::Int64(i64::from_le_bytes(self.arr()?)),
            6 => Value::Float(f32::from_le_bytes(self.arr()?)),
            7 => Value::Double(f64::from_le_bytes(self.arr()?)),
            8 => Value::Decimal(i128::from_le_bytes(self.arr()?)),
            9 => Value::String(self.string()?),
            10 => Value::Binary(self.bytes()?.to_vec()),
            11 => Value::Date(i32::from_le_bytes(self.arr()?)),
            12 => Value::Timestamp(i64::from_le_bytes(self.arr()?)),
            t => return Err(self.err(&format!("unknown value tag {t}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let vals = vec![
            Value::Null,
            Value::Bool(true),
            Value::Int8(-1),
            Value::Int16(-300),
            Value::Int32(5),
            Value::Int64(-9),
            Value::Float(1.5),
            Value::Double(2.5),
            Value::Decimal(-12345678901234567890),
            Value::String("héllo".into()),
            Value::Binary(vec![0, 255]),
            Value::Date(3),
            Value::Timestamp(-4),
        ];
        let mut buf = Vec::new();
        for v in &vals {
            put_value(&mut buf, v);
        }
        let mut r = Reader::new(&buf, "test");
        for v in &vals {
            assert_eq!(&r.value().unwrap(), v);
        }
        assert!(r.is_empty());
        assert!(Reader::new(&[9, 5, 0, 0, 0, b'a'], "t").value().is_err());
        assert!(Reader::new(&[99], "t").value().is_err());
    }
}
