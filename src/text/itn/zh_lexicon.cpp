// Chinese ITN word lists (see zh_lexicon.hpp). Lists are short; lookups scan
// them in order (longest entries first where prefixes overlap). Currency
// symbols and whitelist acronyms follow NeMo-text-processing's zh tables.
#include "zh_lexicon.hpp"

namespace qasr::itn::zh {

bool starts_with(const Text& t, size_t i, std::u32string_view s) {
    if (i + s.size() > t.size()) return false;
    for (size_t k = 0; k < s.size(); ++k) if (t[i + k] != s[k]) return false;
    return true;
}

size_t idiom_at(const Text& t, size_t i) {
    static constexpr std::u32string_view kIdioms[] = {
        U"不管三七二十一", U"五十步笑百步", U"十八般武艺", U"三七二十一", U"一点一点", U"一点一滴",
        U"一点儿", U"一点点", U"一会儿", U"一下子", U"三心二意", U"一五一十", U"十全十美", U"三十而立",
        U"七十二变", U"九九归一", U"乱七八糟", U"十之八九", U"一心一意", U"一清二楚", U"一干二净",
        U"三番五次", U"四面八方", U"五花八门", U"七上八下", U"千千万万", U"万无一失", U"一模一样",
        U"独一无二", U"千方百计", U"百发百中", U"一石二鸟", U"一举两得", U"三三两两", U"四十不惑",
        U"五十知天命", U"二十四节气", U"九九八十一", U"一百八十度大转弯", U"一千零一夜", U"三十六计", U"二十四史", U"一一", U"十分",
        U"万一", U"一起", U"一些", U"一样", U"一直", U"一定", U"一般", U"一切", U"统一", U"唯一",
        U"一致", U"一边", U"一旦", U"一共", U"一向", U"一律", U"一同", U"一再", U"一番", U"一阵",
    };
    for (auto s : kIdioms) if (starts_with(t, i, s)) return s.size();
    return 0;
}

size_t whitelist_at(const Text& t, size_t i, std::string_view& out) {
    struct E { std::u32string_view in; std::string_view out; };
    static constexpr E kList[] = {
        {U"研究生管理专业入学考试", "GMAT"}, {U"美国研究生入学考试", "GRE"}, {U"全球定位系统", "GPS"},
        {U"统一资源定位符", "URL"}, {U"平均学分绩点", "GPA"}, {U"发光二极管", "LED"}, {U"国内生产总值", "GDP"},
        {U"首席执行官", "CEO"}, {U"通用串行总线", "USB"}, {U"自动取款机", "ATM"}, {U"人力资源", "HR"},
        {U"刷卡机", "POS机"}, {U"数位多功能光碟", "DVD"}, {U"镭射唱片", "CD"}, {U"虚拟专用网络", "VPN"},
        {U"网络互联协议", "IP"}, {U"脱氧核糖核酸", "DNA"}, {U"核糖核酸", "RNA"}, {U"可移植文档格式", "PDF"},
        {U"社会性网络服务", "SNS"},
    };
    for (const auto& e : kList)
        if (starts_with(t, i, e.in)) { out = e.out; return e.in.size(); }
    return 0;
}

size_t currency_at(const Text& t, size_t i, std::string_view& symbol) {
    struct E { std::u32string_view in; std::string_view sym; };
    static constexpr E kList[] = {
        {U"印度卢布", "₹"}, {U"印度盧布", "₹"}, {U"印度卢比", "₹"}, {U"印度盧比", "₹"}, {U"俄罗斯卢布", "₽"},
        {U"俄羅斯盧布", "₽"}, {U"美元", "US$"}, {U"美金", "US$"}, {U"欧元", "€"}, {U"歐元", "€"},
        {U"英镑", "£"}, {U"英鎊", "£"}, {U"加拿大元", "CAD$"}, {U"加元", "CAD$"}, {U"加币", "CAD$"},
        {U"瑞士法郎", "Fr"}, {U"新加坡元", "SGD$"}, {U"新加坡币", "SGD$"}, {U"新西兰元", "NZD$"},
        {U"新台币", "TWDNT$"}, {U"新臺幣", "TWDNT$"}, {U"泰铢", "฿"}, {U"泰銖", "฿"},
        {U"日元", "JPY¥"}, {U"日圆", "JPY¥"}, {U"日圓", "JPY¥"}, {U"韩元", "₩"}, {U"韓元", "₩"},
        {U"韩币", "₩"}, {U"港元", "HKD$"}, {U"港币", "HKD$"}, {U"港幣", "HKD$"}, {U"人民币", "￥"},
        {U"人民幣", "￥"}, {U"卢布", "₽"}, {U"元", "¥"}, {U"圆", "¥"}, {U"圓", "¥"},
    };
    for (const auto& e : kList)
        if (starts_with(t, i, e.in)) { symbol = e.sym; return e.in.size(); }
    return 0;
}

size_t duration_at(const Text& t, size_t i) {
    static constexpr std::u32string_view kUnits[] = {U"个小时", U"個小時", U"个钟头", U"個鐘頭", U"小时", U"小時",
                                                     U"分钟", U"分鐘", U"秒钟", U"秒鐘", U"秒"};
    for (auto s : kUnits) if (starts_with(t, i, s)) return s.size();
    return 0;
}

size_t unit_at(const Text& t, size_t i) {
    static constexpr std::u32string_view kUnits[] = {
        U"平方公里", U"平方千米", U"平方米", U"立方米", U"平方厘米", U"摄氏度", U"华氏度", U"公里", U"千米",
        U"厘米", U"毫米", U"微米", U"纳米", U"公斤", U"千克", U"毫克", U"公顷", U"毫升", U"千瓦时",
        U"千瓦", U"兆瓦", U"赫兹", U"千赫", U"兆赫", U"字节", U"千字节", U"兆字节", U"英寸", U"英尺",
        U"英里", U"盎司", U"块钱", U"块", U"毛钱", U"角钱", U"分钱", U"米", U"克", U"吨", U"升", U"度", U"瓦", U"伏", U"磅", U"亩",
        U"岁", U"斤", U"%",
    };
    for (auto s : kUnits) if (starts_with(t, i, s)) return s.size();
    return 0;
}

} // namespace qasr::itn::zh
